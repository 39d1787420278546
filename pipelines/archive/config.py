"""Configuration of the archiver (`[archive]` in rtrl.toml)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ArchiveConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output_dir: str = Field(default="", description="Parquet event log root; '' means <state_dir>/archive.")
    batch_max_events: int = Field(default=50_000, ge=1, le=5_000_000, description="Flush after this many events.")
    batch_max_seconds: float = Field(default=2.0, gt=0, le=3600, description="Flush at least this often.")
    poll_timeout_ms: int = Field(default=200, ge=1, le=60_000)
