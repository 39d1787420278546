"""Configuration of the telemetry SDK (`[sdk]` in rtrl.toml)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class SdkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queue_size: int = Field(default=100_000, ge=1, le=10_000_000,
                            description="Events held in memory before the queue-full policy applies.")
    queue_full_policy: Literal["drop_newest", "drop_oldest", "spool"] = Field(
        default="spool", description="When the in-memory queue is full: drop the new event, drop the oldest, or "
        "write the new event straight to the on-disk spool. Every drop is counted by reason.")
    batch_size: int = Field(default=500, ge=1, le=100_000, description="Events per Kafka send batch.")
    linger_ms: int = Field(default=20, ge=0, le=60_000, description="How long the sender waits to fill a batch.")
    send_timeout_s: float = Field(default=10.0, gt=0, le=600, description="Wait for acks=all before spooling.")
    spool_dir: str = Field(default="", description="On-disk spool; '' means <state_dir>/spool/<client name>.")
    spool_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1024, description="Bound on the spool's size; "
                                 "events past it are dropped and counted (reason spool_full).")
    spool_segment_bytes: int = Field(default=8 * 1024 * 1024, ge=4096, le=1024 * 1024 * 1024,
                                     description="Size at which the spool starts a new segment file; a segment is "
                                     "deleted once everything in it was resent.")
    spool_fsync_every: int = Field(default=200, ge=1, le=100_000, description="fsync the spool every N events.")
    write_ahead: bool = Field(default=False, description="Write each event to a write-ahead log (<spool_dir>/wal) "
                              "on the caller's thread before `emit` returns, so a kill of the process right after "
                              "loses nothing; the caller then also pays for redaction and serialization "
                              "(`instrumentation.wal`). Serving turns it on for its own client "
                              "(serving.telemetry_write_ahead).")
    retry_interval_s: float = Field(default=1.0, gt=0, le=300, description="How often the spool retries the broker.")
    sampling: dict[str, Annotated[float, Field(ge=0.0, le=1.0)]] = Field(default_factory=dict, description="Per event type keep-fraction in [0, 1] "
                                       "(deterministic by event_id); types not listed are always kept.")
    privacy_mode: bool = Field(default=False, description="Send no trainable content for every event.")
    redact_secrets: bool = Field(default=True, description="Redact secrets in text fields before sending.")
