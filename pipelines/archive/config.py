"""Configuration of the archiver (`[archive]` in rtrl.toml)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ArchiveConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    output_dir: str = Field(default="", description="Parquet event log root; '' means <state_dir>/archive.")
    batch_max_events: int = Field(default=50_000, ge=1, le=5_000_000,
                                  description="Flush when the batch in flight holds this many messages.")
    batch_max_bytes: int = Field(default=64 * 2**20, ge=1024, le=2**31,
                                 description="Flush when the batch in flight's messages (their Kafka values) reach "
                                 "this many bytes: bounds the archiver's memory.")
    batch_max_seconds: float = Field(default=30.0, gt=0, le=3600,
                                     description="Flush at least this often: a record reaches the archive at most "
                                     "this long (plus one poll) after the archiver reads it. Each flush writes a "
                                     "file per partition and event type, so this sets how many small files a quiet "
                                     "archive gets. Nothing in the cycle waits on the archive (the reward job reads "
                                     "Kafka); `rtrl archive --until-idle` flushes when it stops.")
    poll_timeout_ms: int = Field(default=200, ge=1, le=60_000,
                                 description="How long one Kafka poll waits for records before the loop looks at "
                                 "its flush deadline and stop signals again.")
    dedupe_window: int = Field(default=200_000, ge=0, le=10_000_000,
                               description="How many recent (org_id, event_id) pairs are remembered to drop "
                               "client retries (rebuilt at start from the newest archived files); 0 = dedupe "
                               "within a batch only.")
    group_id: str = Field(default="rtrl-archiver", min_length=1, max_length=255,
                          description="Kafka consumer group the archived positions are committed under, for "
                          "monitoring (lag) only: the archive's manifests are the source of truth.")
    compression: Literal["zstd", "snappy", "gzip", "none"] = Field(
        default="zstd", description="Parquet compression codec of the data files.")
    metrics_port: int = Field(default=18390, ge=0, le=65535,
                              description="Serve the archiver's Prometheus metrics (GET /metrics, "
                              "docs/monitoring.md) on this port; 0 = off. A port already taken is a warning: the "
                              "archiver archives without metrics.")
    metrics_host: str = Field(default="127.0.0.1", min_length=1,
                              description="Address the metrics port listens on (0.0.0.0: every interface).")
    cluster_check_s: float = Field(default=10.0, gt=0, le=3600,
                                   description="How often the running archiver checks that the Kafka cluster id "
                                   "is unchanged (a new id means the log it was reading is gone).")
    topic_wait_s: float = Field(default=30.0, ge=0, le=3600,
                                description="How long start-up waits for the event topics to exist.")
    checkpoint_every_manifests: int = Field(default=500, ge=1, le=1_000_000,
                                            description="Write a checkpoint (every committed manifest folded into "
                                            "one record) once this many manifests were committed since the last "
                                            "one, and at every maintenance run: recovery, readers and the dashboard "
                                            "read the checkpoint and at most about this many manifests.")
    compact_every_s: float = Field(default=300.0, gt=0, le=7 * 86400,
                                   description="How often the running archiver maintains the archive: checkpoint, "
                                   "compaction of small files, age retention, deletion of retired files (`rtrl "
                                   "archive compact` runs the same once).")
    compact_target_bytes: int = Field(default=64 * 2**20, ge=1024, le=2**32,
                                      description="Compaction merges a partition's files smaller than this into "
                                      "files of at most about this size.")
    compact_min_files: int = Field(default=8, ge=2, le=1_000_000,
                                   description="A partition (event type, event date, Kafka cluster) is compacted "
                                   "once it holds this many files smaller than compact_target_bytes.")
    retention_s: float = Field(default=30 * 86400.0, ge=0, le=3650 * 86400.0,
                               description="Age retention: an event date's partition is deleted, whole, once its "
                               "end is this long ago (dead letters and duplicate records: once committed this long "
                               "ago; `rtrl archive import`'s records in _imports/: once written this long ago); 0 "
                               "keeps everything.")
    retire_grace_s: float = Field(default=3600.0, ge=0, le=7 * 86400.0,
                                  description="A file replaced by compaction or expired by retention leaves the "
                                  "archive at once but is deleted from storage this long after, so a reader (a "
                                  "replay) that listed the archive before still finds every file it listed.")
    check_crcs: bool = Field(default=True,
                             description="Verify Kafka record CRCs. kafka-python computes CRC32C in pure Python (about a "
                             "third of the archiver's CPU) unless the `crc32c` package is installed.")
