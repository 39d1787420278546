"""The archiver: Kafka event topics -> the Parquet event log, exactly once across crashes.

    start:  lock the root (an flock; for an object-store root a lease the loop renews); read the cluster id;
            `recover` (delete orphans, positions from manifests, dedupe window from the newest files); assign
            every partition at its position.
    loop:   poll -> `Batch.add` (parse, dedupe, dead-letter) -> flush at `batch_max_events`, `batch_max_bytes` or
            `batch_max_seconds` -> between flushes, maintenance (`maintenance.py`: checkpoint, compaction, retention)
            every `compact_every_s` or after `checkpoint_every_manifests` manifests.
    flush:  1. data + dead-letter files, each durable (`writer`)
            2. dead letters published to the dead-letter topic (acks=all; at least once)
            3. one manifest per partition batch (`manifest`): the commit point
            4. offsets committed to Kafka (monitoring only; a failure is counted, never fatal)
A crash anywhere before 3 leaves files no manifest lists; the next start deletes them and reads those offsets
again. A crash after 3 loses nothing: the next start resumes after the manifested offsets. Recovery reads the
current checkpoint and the manifests after it, and logs how many.

`run` stops on SIGTERM/SIGINT (or `stop_event`) after committing the batch in flight; a second signal abandons it
uncommitted. After an exception from `flush` the instance must not be reused: restarting (recovery) is the fix.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from kafka.errors import KafkaError

from pipelines.archive import layout
from pipelines.archive.batch import Batch, flush_due
from pipelines.archive.config import ArchiveConfig
from pipelines.archive.consumer import KafkaSource, Source
from pipelines.archive.deadletter import DeadLetterSink, KafkaDeadLetterSink
from pipelines.archive.dedupe import RecentIds, tenant_key
from pipelines.archive.lock import RootLock
from pipelines.archive.maintenance import MaintenanceResult, maintain, maintenance_due
from pipelines.archive.manifest import Manifest, Recovery, recover, write_manifest
from pipelines.archive.messages import SourceMessage, tp_name
from pipelines.archive.stats import ArchiveStats
from pipelines.archive.writer import write_partition_files
from schemas import storage

Log = Callable[[str], None]
# Fault injection for tests: called with the name of each commit step just completed.
FAULT_POINTS = ("files_written", "dead_letters_published", "manifest_written", "kafka_committed")
# `--until-idle`: how much longer than the idle time to keep polling while Kafka says records are waiting.
IDLE_MAX_EXTRA_S = 60.0


def _no_fault(point: str) -> None:
    pass


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class Archiver:
    def __init__(self, root: Path | str, cfg: ArchiveConfig, source: Source, sink: DeadLetterSink, *,
                 log: Log = print, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], datetime] = _utc_now, fault: Callable[[str], None] = _no_fault):
        self.root = storage.normalize(root)   # a local Path, or an object-store URL (schemas.storage)
        self.cfg = cfg
        self.source = source
        self.sink = sink
        self.log = log
        self.clock = clock
        self.wall_clock = wall_clock      # retention and retirement compare commit times with it
        self.fault = fault
        self.stats = ArchiveStats()
        self.window = RecentIds(cfg.dedupe_window)
        self.batch = Batch(self.window)
        self.cluster_id = ""
        self.partitions: list[tuple[str, int]] = []
        self.consumed: dict[tuple[str, int], int] = {}   # next offset expected per partition (in memory)
        self._lock = RootLock(self.root)
        self._batch_started: float | None = None
        self._first_record_at: float | None = None
        self._last_cluster_check = 0.0
        self._started = False
        self._behind = False
        self._behind_checked_at = float("-inf")
        self._maintained_at = 0.0
        self._maintenance_failed = False
        self._manifests_since_checkpoint = 0

    @classmethod
    def from_config(cls, cfg, log: Log = print) -> "Archiver":
        """An archiver over the configured Kafka (an `RtrlConfig`), writing to `archive.output_dir`."""
        from schemas.topics import DEAD_LETTER_TOPIC, EVENT_TOPICS

        bootstrap = cfg.kafka  # its client settings, security included (schemas.kafka_clients)
        source = KafkaSource(bootstrap, EVENT_TOPICS, cfg.archive.group_id, cfg.archive.topic_wait_s,
                             check_crcs=cfg.archive.check_crcs)
        try:
            sink = KafkaDeadLetterSink(bootstrap, DEAD_LETTER_TOPIC)
        except BaseException:
            source.close()
            raise
        return cls(layout.archive_root(cfg), cfg.archive, source, sink, log=log)

    # -- start-up ---------------------------------------------------------------------------------------------

    def start(self) -> Recovery:
        """Lock the root, recover it, and position the consumer. Returns what recovery found."""
        storage.mkdirs(self.root)
        self._lock.acquire()
        self._started = True
        self.cluster_id = self.source.cluster_id()
        self._last_cluster_check = self.clock()
        rec = self._recover_and_assign()
        self._maintained_at = self.clock()
        self._manifests_since_checkpoint = rec.manifests_read
        self.window.add_all(rec.recent_ids)
        self.stats.orphans_deleted += len(rec.orphans_deleted)
        self.stats.missing_files += len(rec.missing_files)
        self.stats.recovery_manifests_read = rec.manifests_read
        checkpoint = (f"checkpoint {rec.checkpoint} ({rec.checkpoint_files} files)" if rec.checkpoint is not None
                      else "no checkpoint")
        self.log(f"archive: root {self.root}; cluster {self.cluster_id}; recovery read {checkpoint} and "
                 f"{rec.manifests_read} manifests after it ({rec.manifests_other_clusters} from other clusters); "
                 f"{len(rec.orphans_deleted)} orphan files "
                 f"deleted; {len(rec.recent_ids)} recent event ids remembered; resuming "
                 f"{len(rec.positions)} of {len(self.partitions)} partitions from manifests, the rest from the start")
        for p in rec.missing_files[:10]:
            self.log(f"archive: WARNING: manifested file missing: {p}")
        return rec

    def _recover_and_assign(self) -> Recovery:
        rec = recover(self.root, self.cluster_id, self.cfg.dedupe_window)
        partitions = self.source.partitions()
        positions: dict[tuple[str, int], int | None] = {tp: rec.positions.get(tp) for tp in partitions}
        self.source.assign(positions)
        self.partitions = partitions
        self.consumed = {tp: off for tp, off in positions.items() if off is not None}
        self.stats.cluster_id = self.cluster_id
        self.stats.positions = {tp_name(tp): off for tp, off in sorted(rec.positions.items())}
        return rec

    # -- consuming --------------------------------------------------------------------------------------------

    def accept(self, messages: list[SourceMessage]) -> None:
        """Add consumed records to the batch in flight (records at already-archived offsets are skipped)."""
        now = self.clock()
        for m in messages:
            expected = self.consumed.get(m.tp)
            if expected is not None and m.offset < expected:
                self.stats.stale_skipped += 1
                continue
            if self._batch_started is None:
                self._batch_started = now
            if self._first_record_at is None:
                self._first_record_at = now
            self.batch.add(m)
            self.consumed[m.tp] = m.offset + 1

    def poll_once(self) -> int:
        room = self.cfg.batch_max_events - len(self.batch)
        if room <= 0:  # a full batch that could not be flushed yet (Kafka did not answer the cluster check)
            time.sleep(self.cfg.poll_timeout_ms / 1000)
            return 0
        try:
            messages = self.source.poll(room, self.cfg.poll_timeout_ms)
        except (OSError, KafkaError) as e:
            self.stats.poll_errors += 1
            self.log(f"archive: poll failed ({type(e).__name__}: {e}); retrying")
            time.sleep(self.cfg.poll_timeout_ms / 1000)
            return 0
        self.accept(messages)
        return len(messages)

    def batch_due(self) -> bool:
        c = self.cfg
        return flush_due(len(self.batch), self.batch.bytes, self.clock() - (self._batch_started or 0.0),
                         c.batch_max_events, c.batch_max_bytes, c.batch_max_seconds)

    # -- the cluster id ---------------------------------------------------------------------------------------

    def check_cluster(self) -> bool | None:
        """True if the cluster id is unchanged; False if it changed (the batch in flight is abandoned and the
        partitions restart from the new log's manifests, i.e. its beginning); None if Kafka did not answer."""
        self._last_cluster_check = self.clock()
        try:
            cid = self.source.cluster_id()
        except (OSError, KafkaError) as e:
            self.log(f"archive: cannot read the Kafka cluster id ({type(e).__name__}: {e})")
            return None
        if cid == self.cluster_id:
            self._read_lag()
            return True
        dropped = len(self.batch)
        self.log(f"archive: Kafka cluster id changed from {self.cluster_id} to {cid}: the log the offsets referred "
                 f"to is gone; abandoning {dropped} uncommitted messages and reading the new log from its start")
        if dropped:
            self.stats.abandoned_batches += 1
        self._reset_batch()
        self.cluster_id = cid
        self._recover_and_assign()
        return False

    def _read_lag(self) -> None:
        """Kafka's records past each partition's position, for /metrics (a source without `lag`: none)."""
        lag = getattr(self.source, "lag", None)
        if lag is None:
            return
        try:
            self.stats.lag = {tp_name(tp): n for tp, n in lag().items()}
        except (OSError, KafkaError) as e:
            self.log(f"archive: cannot read end offsets for the lag ({type(e).__name__}: {e})")

    # -- committing -------------------------------------------------------------------------------------------

    def _reset_batch(self) -> None:
        self.batch = Batch(self.window)
        self._batch_started = None

    def flush(self) -> list[Manifest]:
        """Commit the batch in flight (see the module docstring for the protocol). Returns its manifests."""
        batch = self.batch
        if not len(batch):
            return []
        if self.check_cluster() is not True:
            return []
        parts = [batch.partitions[tp] for tp in sorted(batch.partitions)]
        files = {pb.tp: write_partition_files(self.root, pb, self.cluster_id, self.cfg.compression) for pb in parts}
        self.fault("files_written")
        letters = batch.dead_letters
        if letters:
            self.sink.publish(letters, self.cluster_id)
            self.fault("dead_letters_published")
        self._lock.renew()  # a lease lost meanwhile (an object-store root) stops us before the commit point
        manifests = []
        for pb in parts:
            m = Manifest(self.cluster_id, pb.topic, pb.partition, pb.first_offset, pb.last_offset, pb.messages,
                         len(pb.events), pb.duplicates, dict(Counter(d.reason for d in pb.dead_letters)),
                         files[pb.tp])
            write_manifest(self.root, m)
            manifests.append(m)
            self.fault("manifest_written")
        self.window.add_all(tenant_key(e) for pb in parts for e, _ in pb.events)
        self._reset_batch()
        self._record(manifests)
        self._commit_kafka(manifests)
        self.fault("kafka_committed")
        self.log(self.stats.progress_line(sum(m.events for m in manifests), sum(m.messages for m in manifests)))
        return manifests

    def _record(self, manifests: list[Manifest]) -> None:
        s = self.stats
        s.batches += 1
        for m in manifests:
            s.manifests += 1
            s.messages += m.messages
            s.events_written += m.events
            s.duplicates_dropped += m.duplicates
            for reason, n in m.dead_letters.items():
                s.dead_letters[reason] = s.dead_letters.get(reason, 0) + n
            s.files_written += len(m.files)
            s.bytes_written += sum(f.bytes for f in m.files)
            s.set_position(m.tp, m.last_offset + 1)
        self._manifests_since_checkpoint += len(manifests)
        s.last_commit_wall = self.wall_clock().timestamp()
        if self._first_record_at is not None:
            s.busy_s = self.clock() - self._first_record_at

    def _commit_kafka(self, manifests: list[Manifest]) -> None:
        try:
            self.source.commit({m.tp: m.last_offset + 1 for m in manifests})
        except (OSError, KafkaError) as e:
            self.stats.kafka_commit_errors += 1
            self.log(f"archive: offset commit to Kafka failed ({type(e).__name__}: {e}); harmless, the manifests "
                     "are the source of truth")

    # -- the loop ---------------------------------------------------------------------------------------------

    def run(self, until_idle_s: float | None = None, stop_event: threading.Event | None = None) -> ArchiveStats:
        """Archive until stopped (SIGTERM/SIGINT or `stop_event`), or until `until_idle_s` seconds pass without a
        new record while Kafka reports no unread record; in that draining mode a poll that finds nothing commits
        the batch in flight at once. Commits the batch in flight before returning."""
        stop = stop_event or threading.Event()
        restore = _install_signal_handlers(stop, self.log)
        try:
            if not self._started:
                self.start()
            last_record = self.clock()
            while not stop.is_set():
                self._lock.renew()
                n = self.poll_once()
                now = self.clock()
                if n:
                    last_record = now
                if self.batch_due() or (until_idle_s is not None and not n and len(self.batch)):
                    self.flush()   # draining (--until-idle): a poll that found nothing commits what was read
                elif now - self._last_cluster_check >= self.cfg.cluster_check_s:
                    self.check_cluster()
                since = 0 if self._maintenance_failed else self._manifests_since_checkpoint  # retry on the timer
                if maintenance_due(self.clock(), self._maintained_at, since, self.cfg):
                    self.maintain()
                if (until_idle_s is not None and not n and not len(self.batch) and now - last_record >= until_idle_s
                        and not self._certainly_behind(now - last_record - until_idle_s)):
                    self.log(f"archive: idle for {until_idle_s:g}s; stopping")
                    break
            if stop.is_set():
                self.log(f"archive: {getattr(stop, 'signal_name', 'stop requested')}: committing the batch in "
                         f"flight ({len(self.batch)} messages), then stopping (signal again to abandon it)")
            if len(self.batch):
                self.flush()
            return self.stats
        finally:
            restore()
            self.close()

    # -- maintenance ------------------------------------------------------------------------------------------

    def maintain(self) -> MaintenanceResult | None:
        """Checkpoint, compact, expire and delete retired files (`maintenance.py`), between two flushes. A storage
        error is logged and counted (the next run retries); a lost lease (ArchiveError) stops the archiver."""
        self._maintained_at = self.clock()
        try:
            r = maintain(self.root, self.cfg, self.wall_clock(), renew=self._lock.renew, log=self.log)
        except OSError as e:
            self._maintenance_failed = True
            self.stats.maintenance_errors += 1
            self.log(f"archive: maintenance failed ({type(e).__name__}: {e}); retrying in "
                     f"{self.cfg.compact_every_s:g}s")
            return None
        self._maintained_at = self.clock()
        self._maintenance_failed = False
        if r.checkpoint is not None:
            self._manifests_since_checkpoint = 0
            self.stats.record_maintenance(r)
            self.log(r.line())
        return r

    def _certainly_behind(self, overdue_s: float) -> bool:
        """Whether Kafka says records are waiting although none arrived for the idle time (a slow fetch): then
        `--until-idle` keeps polling, for at most IDLE_MAX_EXTRA_S more. Asked at most once a second."""
        if overdue_s >= IDLE_MAX_EXTRA_S:
            self.log(f"archive: Kafka reports unread records but none arrived for {IDLE_MAX_EXTRA_S:g}s more; "
                     "stopping anyway")
            return False
        now = self.clock()
        if now - self._behind_checked_at < 1.0:
            return self._behind
        self._behind_checked_at = now
        try:
            self._behind = self.source.behind()
        except (OSError, KafkaError) as e:
            self.log(f"archive: cannot read end offsets ({type(e).__name__}: {e})")
            self._behind = False
        return self._behind

    def close(self) -> None:
        try:
            self.source.close()
        finally:
            try:
                self.sink.close()
            finally:
                self._lock.release()


def _install_signal_handlers(stop: threading.Event, log: Log) -> Callable[[], None]:
    """SIGTERM/SIGINT set `stop` (finish the batch in flight); a second one raises KeyboardInterrupt (abandon it).
    Only possible in the main thread; elsewhere the caller's `stop_event` is the way to stop."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):  # no I/O here: a print interrupted by a signal handler's print can fail
        if stop.is_set():
            raise KeyboardInterrupt
        stop.signal_name = signal.Signals(signum).name
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore
