"""The archive with an s3:// root, against a real S3 server (moto's, as the stack runs it): the same messages give
the same frames as a local root; crash recovery works there; the single-writer lease holds; nothing is written
to local disk; `rtrl archive import FILE --archive s3://...` works."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest

from infra.argv import rtrl_argv
from pipelines.archive import layout
from pipelines.archive.lock import RootLock, S3Lease
from pipelines.archive.manifest import ArchiveError, load_manifests, recover
from pipelines.archive.reader import (archived_event_ids, event_time_span, list_files, read_dead_letters, read_events,
                                      read_file)
from schemas import storage, to_wire
from tests.unit.archive.helpers import T0, FakeClock, FakeLog, all_types, archive_all, make_archiver, make_event

pytestmark = pytest.mark.integration


class Crash(Exception):
    pass


def crash_at(point: str):
    def fault(p: str) -> None:
        if p == point:
            raise Crash(p)
    return fault


def hostile_log(n: int = 60) -> tuple[FakeLog, list]:
    """Events of every type over two days and two partitions, a retried duplicate, and malformed messages."""
    log = FakeLog(partitions=2)
    events = all_types(n // 2) + all_types(n - n // 2, T0.replace(day=2))
    log.produce(events)
    log.produce(events[:3])  # client retries: same event_ids again
    log.append("telemetry.tools", b"not json", partition=0)
    log.append("telemetry.edits", None, b"k", partition=1)
    return log, events


@pytest.fixture
def no_local_writes(tmp_path, monkeypatch):
    """Run in an empty cwd with an empty temp dir; after the test, both must still be empty."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    yield
    assert list(cwd.rglob("*")) == [] and list(tmp.rglob("*")) == []


def test_an_s3_root_gives_the_same_frames_as_a_local_root(s3_server, tmp_path, no_local_writes):
    log, events = hostile_log()
    local, remote = tmp_path / "local", s3_server.url("archive")
    local_stats, _ = archive_all(local, log, batch_max_events=25)
    remote_stats, _ = archive_all(remote, log, batch_max_events=25)
    timing = {"busy_s": 0, "events_per_s": 0, "last_commit_wall": 0}     # when, not what
    assert remote_stats.as_dict() | timing == local_stats.as_dict() | timing

    for dedupe in (True, False):
        assert read_events(remote, dedupe=dedupe).equals(read_events(local, dedupe=dedupe))
    assert len(read_events(remote)) == len(events)
    assert read_events(remote, "suggestion_shown", T0, T0.replace(day=2)).equals(
        read_events(local, "suggestion_shown", T0, T0.replace(day=2)))
    assert read_dead_letters(remote).equals(read_dead_letters(local))
    assert archived_event_ids(remote) == archived_event_ids(local) == {e.event_id for e in events}
    assert event_time_span(remote) == event_time_span(local)
    # what pipelines/rewards/read_archive.py calls, with the root as the string URL
    assert [f.path for f in list_files(remote)] == [f.path for f in list_files(local)]
    for f in list_files(remote):
        assert read_file(remote, f).equals(read_file(local, f))

    keys = s3_server.keys(remote)
    rel = sorted(k.split("/", 1)[1] for k in keys)
    local_files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert rel == [p for p in local_files if p != layout.LOCK_FILE]  # the lease is released at the end
    assert not any(storage.is_temp(k) for k in keys)


def test_crash_recovery_on_s3_removes_orphans_and_loses_nothing(s3_server, no_local_writes):
    log, events = hostile_log(40)
    root = s3_server.url("crash")
    a, _ = make_archiver(root, log, fault=crash_at("files_written"), batch_max_events=1000)
    with pytest.raises(Crash):
        a.run(until_idle_s=1.0)
    orphans = [k for k in s3_server.keys(root) if k.endswith(".parquet")]
    assert orphans and not load_manifests(root)
    assert len(read_events(root)) == 0  # readers see committed batches only, never the orphans

    stats, _ = archive_all(root, log, batch_max_events=1000)  # the restart recovers first
    assert stats.orphans_deleted == len(orphans) and stats.events_written == len(events)
    assert archived_event_ids(root) == {e.event_id for e in events}
    assert len(read_events(root, dedupe=False)) == len(events)  # no duplicate from the crashed batch
    assert recover(root, "cluster-a").orphans_deleted == []    # idempotent

    # an orphan that appears later (a crashed writer's upload) is swept too; committed files stay
    stray = storage.join(root, "event_type=edit_applied/event_date=2026-11-01/part-x-0-0-0-cluster-a.parquet")
    storage.write_bytes(stray, b"not a committed file")
    rec = recover(root, "cluster-a")
    assert rec.orphans_deleted == [storage.relative_to(stray, root)] and rec.missing_files == []
    assert not storage.exists(stray) and archived_event_ids(root) == {e.event_id for e in events}


def test_the_lease_keeps_a_second_archiver_off_an_s3_root(s3_server, no_local_writes):
    log = FakeLog(partitions=1)
    log.produce(all_types(5))
    root = s3_server.url("lease")
    first, _ = make_archiver(root, log)
    first.start()
    assert RootLock.holder(root) == os.getpid()
    second, _ = make_archiver(root, log)
    with pytest.raises(ArchiveError, match="holds the lease"):
        second.start()
    first.close()
    assert not storage.exists(storage.join(root, layout.LOCK_FILE))
    second.start()
    second.close()

    clock = FakeClock()  # expiry and renewals on a clock the test moves: no waiting for a lease to run out
    stale = S3Lease(root, ttl_s=30, wall_clock=clock, clock=clock)  # a holder that was killed: its lease expires
    stale.acquire()
    clock.advance(29)
    with pytest.raises(ArchiveError, match="holds the lease"):
        S3Lease(root, wall_clock=clock, clock=clock).acquire()
    clock.advance(2)
    successor = S3Lease(root, wall_clock=clock, clock=clock)
    successor.acquire()
    with pytest.raises(ArchiveError, match="lost the lease"):
        stale.renew(force=True)
    successor.release()


def test_rtrl_archive_import_writes_an_s3_archive_that_reads_like_a_local_one(s3_server, tmp_path):
    events = [make_event("edit_applied", T0), make_event("suggestion_shown", T0.replace(hour=11)),
              make_event("trajectory", T0.replace(hour=12))]
    wire = tmp_path / "events.jsonl"
    wire.write_bytes(b"\n".join([to_wire(e) for e in events] + [b'{"event_type": "nope"}']) + b"\n")
    remote, local = s3_server.url("import"), tmp_path / "local"
    env = {**os.environ, **s3_server.env}
    for root in (remote, str(local)):
        out = subprocess.run(rtrl_argv("--set", f"state_dir={tmp_path / 'state'}", "archive", "import", str(wire),
                                       "--archive", root),
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        summary = json.loads(out.stdout)["archive_import"]
        assert summary["imported_total"] == 3 and summary["dead_letters"] == 1 and summary["archive"] == root
    assert read_events(remote).equals(read_events(local))
    keys = s3_server.keys(remote)
    assert any(k.endswith(".dead_letters.jsonl") for k in keys) and any(k.endswith(".json") and "/_imports/" in k
                                                                         for k in keys)
    letter = json.loads(storage.read_text(next(f"s3://{s3_server.bucket}/{k}" for k in keys
                                                if k.endswith(".dead_letters.jsonl"))))
    assert letter["line"] == 4 and letter["reason"] == "unknown_event_type"
    assert not (tmp_path / "s3:").exists()

    bad = subprocess.run(rtrl_argv("archive", "import", str(wire), "--archive", "gs://elsewhere/x"),
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert bad.returncode == 1 and "unsupported storage URL scheme" in bad.stderr


def test_maintenance_on_an_s3_root_checkpoints_compacts_and_expires_as_on_a_local_root(s3_server, tmp_path,
                                                                                       no_local_writes):
    from datetime import timedelta

    from pipelines.archive.config import ArchiveConfig
    from pipelines.archive.maintenance import maintain
    from pipelines.archive.manifest import recovery_reads
    from pipelines.archive.retention import partition_end

    log, events = hostile_log(40)
    local, remote = tmp_path / "local", s3_server.url("maint")
    for root in (local, remote):
        archive_all(root, log, batch_max_events=5)
    cfg = ArchiveConfig(compact_min_files=2, retire_grace_s=0, retention_s=30 * 86400)
    now = partition_end(T0.date().isoformat()) + timedelta(days=29)      # nothing expired yet
    for root in (local, remote):
        first, second = maintain(root, cfg, now), maintain(root, cfg, now)   # compact; then delete the retired
        assert first.files_compacted > 10 and second.retired_deleted == first.files_compacted
        assert recovery_reads(root)["manifests"] == 0
    assert read_events(remote, dedupe=False).equals(read_events(local, dedupe=False))
    assert len(read_events(remote)) == len(events)
    keys = sorted(k.split("/", 1)[1] for k in s3_server.keys(remote))
    local_files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert keys == [p for p in local_files if p != layout.LOCK_FILE]

    later = now + timedelta(days=1)                                     # the first day's partitions expire
    for root in (local, remote):
        assert maintain(root, cfg, later).partitions_expired > 0
    day2 = {e.event_id for e in events if e.event_time.day == 2}
    assert set(read_events(remote)["event_id"]) == day2 == set(read_events(local)["event_id"])
