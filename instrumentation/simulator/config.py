"""`[simulator]`: the simulated user population (workspaces, tasks, behaviour) and its clock."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SimulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, ge=0)
    orgs: int = Field(default=4, ge=1, le=1000, description="Organizations (each with its own conventions).")
