"""Checkpoints: recovery, readers and the dashboard read the current checkpoint plus the manifests after it, never
the whole history; the answers are the same as from the manifests alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipelines.archive import layout, state as state_module
from pipelines.archive.config import ArchiveConfig
from pipelines.archive.maintenance import maintain, maintenance_due
from pipelines.archive.manifest import load_manifests, recover, recovery_reads
from pipelines.archive.reader import read_dead_letters, read_duplicates, read_events
from pipelines.archive.records import checkpoint_seqs, list_manifests, read_latest_checkpoint
from pipelines.archive.state import archived_positions, load_state
from tests.unit.archive.helpers import T0, FakeLog, all_types, archive_all, make_archiver

NOW = T0 + timedelta(days=1)
KEEP = ArchiveConfig(retention_s=0, compact_min_files=10**6)   # checkpoint only: no compaction, no retention


def small_batches(root, n=60, partitions=2, **kw):
    log = FakeLog(partitions=partitions)
    events = all_types(n)
    log.produce(events)
    log.produce(events[:2])                                  # retried copies: duplicates files
    log.append("telemetry.tools", b"{", partition=0)         # a dead letter
    archive_all(root, log, batch_max_events=5, **kw)
    return log, events


def frames(root):
    return (read_events(root, dedupe=False), read_dead_letters(root), read_duplicates(root))


def test_a_checkpoint_folds_every_manifest_and_readers_see_the_same_archive(tmp_path):
    _, events = small_batches(tmp_path)
    before = frames(tmp_path)
    positions = recover(tmp_path, "cluster-a").positions
    n = len(list_manifests(tmp_path))
    r = maintain(tmp_path, KEEP, NOW)
    assert r.checkpoint == 1 and r.manifests_folded == n > 10
    assert list_manifests(tmp_path) == [] and load_manifests(tmp_path) == []
    after = frames(tmp_path)
    assert all(a.equals(b) for a, b in zip(before, after)) and before[0].height == len(events)
    rec = recover(tmp_path, "cluster-a")
    assert rec.positions == positions and rec.checkpoint == 1 and rec.manifests_read == 0


def test_recovery_reads_the_checkpoint_and_only_the_manifests_after_it(tmp_path):
    log, _ = small_batches(tmp_path)
    maintain(tmp_path, KEEP, NOW)
    more = all_types(10)
    log.produce(more)
    stats, source = archive_all(tmp_path, log, batch_max_events=5)
    assert stats.events_written == len(more)                            # resumed from the checkpoint's positions
    assert stats.recovery_manifests_read == 0
    after = len(list_manifests(tmp_path))
    reads = recovery_reads(tmp_path)
    assert (reads["checkpoint"], reads["manifests"], reads["folded_left"]) == (1, after, 0)
    assert reads["checkpoint_files"] == len(read_latest_checkpoint(tmp_path).files) > 0
    assert recover(tmp_path, "cluster-a").manifests_read == after


def test_an_archiver_writes_a_checkpoint_every_checkpoint_every_manifests_and_a_restart_reads_fewer(tmp_path):
    log = FakeLog(partitions=2)
    events = all_types(300)
    log.produce(events)
    stats, _ = archive_all(tmp_path, log, batch_max_events=5, checkpoint_every_manifests=20, retention_s=0)
    assert stats.manifests > 50 and stats.checkpoints >= stats.manifests // 22
    lines = []
    a, _ = make_archiver(tmp_path, log)
    a.log = lines.append
    a.start()
    a.close()
    read = a.stats.recovery_manifests_read
    assert read < 20 + 2                          # at most one flush past the threshold
    assert any(f"recovery read checkpoint {stats.checkpoints}" in ln and f"and {read} manifests after it" in ln
               for ln in lines)
    assert read_events(tmp_path, dedupe=False).height == len(events)


def test_maintenance_is_due_on_its_timer_or_after_enough_manifests():
    cfg = ArchiveConfig(compact_every_s=300, checkpoint_every_manifests=500)
    assert not maintenance_due(1299.0, 1000.0, 499, cfg)
    assert maintenance_due(1300.0, 1000.0, 0, cfg)
    assert maintenance_due(1001.0, 1000.0, 500, cfg)


def test_folded_manifests_left_by_a_crash_are_skipped_by_readers_and_deleted_by_recovery(tmp_path):
    class Crash(Exception):
        pass

    def crash(point):
        if point == "checkpoint_written":
            raise Crash(point)

    _, events = small_batches(tmp_path)
    n = len(list_manifests(tmp_path))
    with pytest.raises(Crash):
        maintain(tmp_path, KEEP, NOW, fault=crash)
    assert len(list_manifests(tmp_path)) == n                 # still stored, but folded
    s = load_state(tmp_path)
    assert s.manifests == [] and len(s.folded) == n
    assert read_events(tmp_path, dedupe=False).height == len(events)   # once, not twice
    rec = recover(tmp_path, "cluster-a")
    assert rec.folded_deleted == n and list_manifests(tmp_path) == []


def test_a_reader_racing_a_checkpoint_sees_every_event_once(tmp_path, monkeypatch):
    """Maintenance runs between a reader's manifest listing and its checkpoint read, and between its checkpoint
    read and its manifest reads (the manifest it listed is gone): the reader still sees each event once."""
    _, events = small_batches(tmp_path)
    real = state_module.read_latest_checkpoint
    for moment in ("before_checkpoint_read", "after_checkpoint_read"):
        calls = {"n": 0}

        def racing(root, moment=moment):
            calls["n"] += 1
            if calls["n"] == 1 and moment == "before_checkpoint_read":
                maintain(tmp_path, KEEP, NOW)
                return real(root)
            if calls["n"] == 1:
                cp = real(root)
                maintain(tmp_path, KEEP, NOW)        # folds and deletes the manifests just listed
                return cp
            return real(root)

        more = all_types(7)
        log = FakeLog(partitions=2)
        log.produce(more)
        archive_all(tmp_path, log, cluster_id=f"cluster-{moment}", batch_max_events=3)
        events += more
        monkeypatch.setattr(state_module, "read_latest_checkpoint", racing)
        df = read_events(tmp_path, dedupe=False)
        monkeypatch.setattr(state_module, "read_latest_checkpoint", real)
        assert df.height == len(events) and set(df["event_id"]) == {e.event_id for e in events}


def test_the_dashboards_positions_come_from_the_checkpoint_and_manifest_names(tmp_path):
    log, _ = small_batches(tmp_path)
    want = {f"{t}/{p}": len(recs) for (t, p), recs in log.records.items()}
    assert archived_positions(tmp_path, "cluster-a") == want
    maintain(tmp_path, KEEP, NOW)
    assert archived_positions(tmp_path, "cluster-a") == archived_positions(tmp_path) == want
    assert archived_positions(tmp_path, "cluster-b") == {}


def test_only_the_last_two_checkpoints_are_kept(tmp_path):
    log, _ = small_batches(tmp_path, n=10)
    for i in range(4):
        log.produce(all_types(3))
        archive_all(tmp_path, log)
        maintain(tmp_path, KEEP, NOW)
    assert checkpoint_seqs(tmp_path) == [3, 4]
    assert sorted(p.name for p in (tmp_path / layout.CHECKPOINT_DIR).iterdir()) == [
        "checkpoint-000000000003.json", "checkpoint-000000000004.json"]
