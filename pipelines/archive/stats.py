"""What the archiver has done, logged at every flush and printed as JSON at the end."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from pipelines.archive.messages import tp_name


@dataclass
class ArchiveStats:
    cluster_id: str = ""
    batches: int = 0                    # flushes that committed at least one manifest
    manifests: int = 0                  # partition batches committed
    messages: int = 0                   # Kafka records consumed into committed batches
    events_written: int = 0             # rows in committed data files
    duplicates_dropped: int = 0         # same event_id as one already archived or earlier in the batch
    dead_letters: dict[str, int] = field(default_factory=dict)  # by reason code
    files_written: int = 0
    bytes_written: int = 0
    positions: dict[str, int] = field(default_factory=dict)     # 'topic/partition' -> next offset (committed)
    orphans_deleted: int = 0            # at start-up: files of batches that crashed before their manifest
    missing_files: int = 0              # listed by a manifest but absent (reported at start-up)
    stale_skipped: int = 0              # records at offsets already archived (re-delivered by the consumer)
    abandoned_batches: int = 0          # dropped uncommitted (the Kafka cluster id changed under them)
    kafka_commit_errors: int = 0        # monitoring commits that failed (harmless: the manifests are the truth)
    poll_errors: int = 0
    busy_s: float = 0.0                 # seconds from the first consumed record to the last commit
    recovery_manifests_read: int = 0    # at start-up: manifests read after the checkpoint
    checkpoints: int = 0                # maintenance runs that committed a checkpoint
    manifests_folded: int = 0
    files_compacted: int = 0            # small files replaced by compacted ones
    compacted_files_written: int = 0
    files_expired: int = 0              # retired by age retention
    retired_deleted: int = 0            # retired files deleted after their grace period
    maintenance_errors: int = 0
    last_commit_wall: float = 0.0       # when the last batch committed (epoch seconds; 0: none yet)
    lag: dict[str, int] = field(default_factory=dict)           # 'topic/partition' -> records past the consumer's
    # position at the last cluster check (Kafka's reported end; the archiver's own reading, for /metrics)

    @property
    def dead_letters_total(self) -> int:
        return sum(self.dead_letters.values())

    @property
    def events_per_s(self) -> float:
        return self.events_written / self.busy_s if self.busy_s > 0 else 0.0

    def set_position(self, tp: tuple[str, int], next_offset: int) -> None:
        self.positions[tp_name(tp)] = next_offset

    def record_maintenance(self, r) -> None:
        """Add what one maintenance run (`maintenance.MaintenanceResult`) did."""
        self.checkpoints += 1
        self.manifests_folded += r.manifests_folded
        self.files_compacted += r.files_compacted
        self.compacted_files_written += r.files_written
        self.files_expired += r.files_expired
        self.retired_deleted += r.retired_deleted

    def as_dict(self) -> dict:
        return {**asdict(self), "dead_letters_total": self.dead_letters_total,
                "events_per_s": round(self.events_per_s, 1), "busy_s": round(self.busy_s, 3)}

    def progress_line(self, batch_events: int, batch_messages: int) -> str:
        return (f"archive: batch {self.batches}: +{batch_events} events ({batch_messages} messages); "
                f"total {self.events_written} events, {self.duplicates_dropped} duplicates dropped, "
                f"{self.dead_letters_total} dead letters, {self.files_written} files, "
                f"{self.events_per_s:,.0f} events/s; consumed up to "
                f"{sum(self.positions.values())} offsets over {len(self.positions)} partitions")
