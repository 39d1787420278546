"""Configuration of the data-quality suites (`[quality]` in rtrl.toml)."""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field, field_validator


class QualityConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_event_age_s: float = Field(
        default=7 * 86400, gt=0, le=365 * 86400,
        description="An event_time may be at most this long before its received_time (the SDK spools events "
                    "while offline and sends them later); rows without received_time are measured from the "
                    "batch's earliest received_time.")
    max_clock_skew_s: float = Field(
        default=300, ge=0, le=86400,
        description="An event_time may be at most this far after its received_time (client clock ahead).")
    min_event_time: datetime = Field(
        default=datetime(2020, 1, 1, tzinfo=timezone.utc),
        description="No event is older than this (catches zeroed or epoch clocks).")
    events_min_rows: int = Field(default=0, ge=0, description="Fewer event rows fail the events suite.")
    rewards_min_rows: int = Field(default=1, ge=0, description="Fewer reward rows fail the rewards suite: a cycle "
                                  "with no mature reward has nothing to train on.")
    tolerance: float = Field(default=1e-9, gt=0, le=1e-3,
                             description="Absolute tolerance of the reward formula checks (relative past 1).")
    require_spec_version: bool = Field(
        default=True, description="Every reward row must carry the version of the spec it is checked against "
                                  "(the formula checks are only meaningful for that spec).")
    examples: int = Field(default=5, ge=0, le=100, description="Failing rows shown per rule in the report.")
    keep_reports: int = Field(default=20, ge=0, le=100_000, description="Retention of the reports under "
                              "<state_dir>/quality (after each orchestrated cycle): the newest N keep every file; an "
                              "older one keeps its report.json (each suite's rules and results: the dashboard's "
                              "rows) and loses report.md and report.html. A cycle in flight keeps its report whole. "
                              "0 keeps every file.")

    @field_validator("min_event_time")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("min_event_time must carry a timezone (e.g. 2020-01-01T00:00:00Z)")
        return v.astimezone(timezone.utc)
