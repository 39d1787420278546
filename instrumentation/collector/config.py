"""Configuration of the ingest collector (`[collector]` in rtrl.toml)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CollectorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="Bind address; localhost by default.")
    port: int = Field(default=18080, ge=1, le=65535)
    api_keys_file: str = Field(default="", description="Hashed client keys (JSON); '' means <state_dir>/collector_keys.json.")
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024, description="Request size cap.")
    max_events_per_batch: int = Field(default=1000, ge=1, le=100_000)
    rate_limit_events_per_s: float = Field(default=20_000, gt=0, description="Per-client sustained event rate.")
    rate_limit_burst: int = Field(default=40_000, ge=1, description="Per-client token-bucket size (events).")
    signature_max_skew_s: int = Field(default=300, ge=1, le=3600,
                                      description="HMAC-signed requests older or newer than this are rejected.")
