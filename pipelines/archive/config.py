"""Configuration of the archiver (`[archive]` in rtrl.toml)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ArchiveConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output_dir: str = Field(default="", description="Parquet event log root; '' means <state_dir>/archive.")
    batch_max_events: int = Field(default=50_000, ge=1, le=5_000_000, description="Flush after this many events.")
    batch_max_seconds: float = Field(default=2.0, gt=0, le=3600, description="Flush at least this often.")
    poll_timeout_ms: int = Field(default=200, ge=1, le=60_000,
                                 description="How long one Kafka poll waits for records before the loop looks at "
                                 "its flush deadline and stop signals again.")
    dedupe_window: int = Field(default=200_000, ge=0, le=10_000_000,
                               description="How many recent event_ids are remembered to drop client retries "
                               "(rebuilt at start from the newest archived files); 0 = dedupe within a batch only.")
    group_id: str = Field(default="rtrl-archiver", min_length=1, max_length=255,
                          description="Kafka consumer group the archived positions are committed under, for "
                          "monitoring (lag) only: the archive's manifests are the source of truth.")
    compression: Literal["zstd", "snappy", "gzip", "none"] = Field(
        default="zstd", description="Parquet compression codec of the data files.")
    cluster_check_s: float = Field(default=10.0, gt=0, le=3600,
                                   description="How often the running archiver checks that the Kafka cluster id "
                                   "is unchanged (a new id means the log it was reading is gone).")
    topic_wait_s: float = Field(default=30.0, ge=0, le=3600,
                                description="How long start-up waits for the event topics to exist.")
    check_crcs: bool = Field(default=True,
                             description="Verify Kafka record CRCs. kafka-python computes CRC32C in pure Python (about a "
                             "third of the archiver's CPU) unless the `crc32c` package is installed.")
