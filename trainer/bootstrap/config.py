"""`[policy]`: the default policy (a small Llama made here) or any Hugging Face causal-LM checkpoint instead."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PolicyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_checkpoint: str = Field(default="", description="An HF causal-LM folder to register as v0 instead of "
                                                         "bootstrapping the default policy; '' = bootstrap.")
    seed: int = Field(default=0, ge=0)
