"""The run loop: flush triggers, stopping (idle, stop_event, SIGTERM), Kafka commits, progress and stats."""

from __future__ import annotations

import os
import signal
import threading

from kafka.errors import KafkaConnectionError, KafkaTimeoutError

from pipelines.archive.manifest import load_manifests
from pipelines.archive.messages import SourceMessage
from schemas.events import EVENT_TYPES
from tests.unit.archive.helpers import FakeLog, all_types, make_archiver


def test_flushes_whenever_the_batch_reaches_batch_max_events(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(25))
    lines = []
    a, _ = make_archiver(tmp_path, log, batch_max_events=10, batch_max_seconds=3600)
    a.log = lines.append
    stats = a.run(until_idle_s=1.0)
    assert stats.batches == 3 and stats.events_written == 25  # 10 + 10 + the last 5 at the end of the run
    assert [ln.split(":")[1].strip() for ln in lines if ln.startswith("archive: batch")] == [
        "batch 1", "batch 2", "batch 3"]
    assert all(m.messages <= 10 for m in load_manifests(tmp_path))


def test_a_small_batch_is_due_after_batch_max_seconds(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(3))
    a, source = make_archiver(tmp_path, log, batch_max_events=1000, batch_max_seconds=0.5)
    a.start()
    a.poll_once()
    assert len(a.batch) == 3 and not a.batch_due()
    source.clock.advance(0.5)
    assert a.batch_due()
    a.flush()
    assert a.stats.events_written == 3 and not a.batch_due()
    a.close()


class StopAfterFirstPoll:
    """Wraps a source: sets a stop event (or sends a signal) right after the first non-empty poll."""

    def __init__(self, source, action):
        self.source, self.action, self.done = source, action, False

    def __getattr__(self, name):
        return getattr(self.source, name)

    def poll(self, max_records, timeout_ms):
        out = self.source.poll(max_records, timeout_ms)
        if out and not self.done:
            self.done = True
            self.action()
        return out


def test_stop_event_commits_the_batch_in_flight_then_returns(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(30))
    a, source = make_archiver(tmp_path, log, batch_max_events=12, batch_max_seconds=3600)
    stop = threading.Event()
    a.source = StopAfterFirstPoll(source, stop.set)
    stats = a.run(stop_event=stop)
    assert stats.events_written == 12 and stats.batches == 1
    assert sum(m.messages for m in load_manifests(tmp_path)) == 12
    assert source.closed


def test_sigterm_stops_the_run_after_committing_and_restores_the_handler(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(30))
    a, source = make_archiver(tmp_path, log, batch_max_events=12, batch_max_seconds=3600)
    a.source = StopAfterFirstPoll(source, lambda: os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    stats = a.run()  # would run forever without the signal
    assert stats.events_written == 12
    assert signal.getsignal(signal.SIGTERM) is before


def test_positions_are_committed_to_kafka_and_a_failed_commit_is_not_fatal(tmp_path):
    log = FakeLog(partitions=2)
    log.produce(all_types(20))
    a, source = make_archiver(tmp_path, log)
    a.run(until_idle_s=1.0)
    assert source.committed == {tp: len(recs) for tp, recs in log.records.items()}

    log.produce(all_types(5))
    a, source = make_archiver(tmp_path, log)
    source.commit_error = KafkaTimeoutError("coordinator unavailable")
    stats = a.run(until_idle_s=1.0)
    assert stats.kafka_commit_errors == 1 and stats.events_written == 5


def test_records_at_already_archived_offsets_are_skipped(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(4))
    a, _ = make_archiver(tmp_path, log)
    a.run(until_idle_s=1.0)
    b, _ = make_archiver(tmp_path, log)
    b.start()
    old = log.records[("telemetry.edits", 0)][0]
    b.accept([SourceMessage(old.topic, old.partition, old.offset, old.value)])
    assert b.stats.stale_skipped == 1 and len(b.batch) == 0
    b.close()


def test_stats_report_positions_and_totals(tmp_path):
    log = FakeLog(partitions=1)
    n = 2 * len(EVENT_TYPES)                   # two of each type
    log.produce(all_types(n))
    log.append("trajectories", b"x", partition=0)
    a, _ = make_archiver(tmp_path, log)
    d = a.run(until_idle_s=1.0).as_dict()
    assert d["positions"] == {f"{t}/{p}": len(r) for (t, p), r in log.records.items()}
    assert (d["events_written"], d["dead_letters_total"], d["messages"]) == (n, 1, n + 1)
    assert d["cluster_id"] == "cluster-a" and d["files_written"] == len(EVENT_TYPES) + 1  # + 1 dead-letter file


class FailingOnce:
    def __init__(self, source):
        self.source, self.failed = source, False

    def __getattr__(self, name):
        return getattr(self.source, name)

    def poll(self, max_records, timeout_ms):
        if not self.failed:
            self.failed = True
            raise KafkaConnectionError("broker went away")
        return self.source.poll(max_records, timeout_ms)


def test_a_failed_poll_is_counted_and_the_loop_goes_on(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(7))
    a, source = make_archiver(tmp_path, log, poll_timeout_ms=1)
    a.source = FailingOnce(source)
    stats = a.run(until_idle_s=1.0)
    assert stats.poll_errors == 1 and stats.events_written == 7


class Stalling:
    """A slow broker: the first `stalls` polls return nothing (each taking the poll timeout) though records wait."""

    def __init__(self, source, stalls):
        self.source, self.stalls = source, stalls

    def __getattr__(self, name):
        return getattr(self.source, name)

    def poll(self, max_records, timeout_ms):
        if self.stalls:
            self.stalls -= 1
            self.source.clock.advance(timeout_ms / 1000)
            return []
        return self.source.poll(max_records, timeout_ms)


def test_until_idle_keeps_polling_while_kafka_reports_unread_records(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(7))
    a, source = make_archiver(tmp_path, log)
    a.source = Stalling(source, stalls=20)  # 4 s of empty polls, idle limit 1 s
    stats = a.run(until_idle_s=1.0)
    assert stats.events_written == 7


def test_until_idle_gives_up_on_records_that_never_arrive(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(7))
    a, source = make_archiver(tmp_path, log)
    a.source = Stalling(source, stalls=10**9)
    stats = a.run(until_idle_s=1.0)  # returns after IDLE_MAX_EXTRA_S of fake time instead of hanging
    assert stats.events_written == 0


def test_flush_is_due_at_the_first_of_messages_bytes_or_age():
    from pipelines.archive.batch import flush_due

    limits = dict(max_messages=100, max_bytes=10_000, max_seconds=30.0)
    assert not flush_due(0, 0, 999.0, **limits)                # nothing to commit
    assert not flush_due(99, 9_999, 29.9, **limits)
    assert flush_due(100, 10, 0.0, **limits)
    assert flush_due(1, 10_000, 0.0, **limits)
    assert flush_due(1, 10, 30.0, **limits)


def test_a_batch_is_flushed_when_its_messages_reach_batch_max_bytes(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(40))
    size = sum(len(m.value) for recs in log.records.values() for m in recs)
    a, _ = make_archiver(tmp_path, log, batch_max_events=10_000, batch_max_seconds=3600, batch_max_bytes=1024,
                         poll_timeout_ms=1)
    a.start()
    a.poll_once()                                  # one poll takes every record: one batch over the bound
    assert a.batch.bytes == size > 1024 and a.batch_due()
    a.flush()
    assert not a.batch_due() and a.stats.events_written == 40
    a.close()


def test_the_default_flush_interval_writes_far_fewer_batches_than_one_every_2_seconds(tmp_path):
    """Records arriving for 5 minutes: about one batch per batch_max_seconds (30 s by default), not 150."""
    from pipelines.archive.config import ArchiveConfig

    assert ArchiveConfig().batch_max_seconds == 30.0
    log = FakeLog(partitions=1)
    a, source = make_archiver(tmp_path, log)
    a.start()
    for _ in range(150):                           # a trickle: a few events every 2 s
        log.produce(all_types(3))
        a.poll_once()
        if a.batch_due():
            a.flush()
        source.clock.advance(2.0)
    a.flush()
    assert a.stats.events_written == 450 and 10 <= a.stats.batches <= 11
    a.close()
