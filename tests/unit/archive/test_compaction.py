"""Compaction: a partition's small files become one file; a reader at any moment sees each event exactly once,
crash or no crash; replaced files are deleted only after their grace period."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipelines.archive.compaction import plan_compaction
from pipelines.archive.config import ArchiveConfig
from pipelines.archive.maintenance import FAULT_POINTS, maintain
from pipelines.archive.manifest import recover
from pipelines.archive.reader import list_files, read_dead_letters, read_duplicates, read_events, read_file
from pipelines.archive.records import CommittedFile, read_latest_checkpoint
from pipelines.archive.state import load_state
from pipelines.archive.writer import DEAD_LETTERS, EVENTS, FileEntry
from pipelines.rewards.read_archive import file_clusters
from tests.unit.archive.helpers import T0, FakeLog, all_types, archive_all

NOW = T0 + timedelta(days=3)
COMPACT = ArchiveConfig(retention_s=0, compact_min_files=2, retire_grace_s=3600)


def entry(path, size, kind=EVENTS, event_type="edit_applied", event_date="2026-11-01", cluster="c", at="2026-11-01T10"):
    return CommittedFile(FileEntry(path, kind, 1, size, event_type if kind == EVENTS else None,
                                   event_date if kind == EVENTS else None), cluster, at)


def test_plan_packs_each_partitions_small_files_in_commit_order_up_to_the_target():
    files = [entry(f"a{i}", 40, at=f"2026-11-01T10:0{i}") for i in range(5)]          # 5 small, one partition
    files += [entry("big", 500)]                                                        # not small: left alone
    files += [entry("other-day", 40, event_date="2026-11-02")]                          # alone in its partition
    files += [entry(f"b{i}", 40, cluster="d") for i in range(2)]                        # another cluster id
    plan = plan_compaction(files, target_bytes=100, min_files=2)
    assert [[f.entry.path for f in g] for g in plan] == [["a0", "a1"], ["a2", "a3"], ["b0", "b1"]]
    assert plan_compaction(files, target_bytes=100, min_files=6) == []                 # no partition has 6


def test_plan_groups_dead_letters_by_cluster_and_commit_day():
    files = [entry(f"d{i}", 10, kind=DEAD_LETTERS, at=f"2026-11-0{1 + i % 2}T10") for i in range(4)]
    plan = plan_compaction(files, target_bytes=1000, min_files=2)
    assert sorted([f.entry.path for f in g] for g in plan) == [["d0", "d2"], ["d1", "d3"]]


def hostile(root, n=80):
    """Many small files over two days, two partitions, with duplicates and dead letters."""
    log = FakeLog(partitions=2)
    events = all_types(n // 2) + all_types(n - n // 2, T0.replace(day=2))
    log.produce(events)
    log.produce(events[:4])
    log.append("telemetry.tools", b"not json", partition=0)
    log.append("telemetry.edits", None, b"k", partition=1)
    archive_all(root, log, batch_max_events=4)
    return events


def snapshot(root):
    return read_events(root, dedupe=False), read_dead_letters(root), read_duplicates(root)


def same(a, b):
    return all(x.equals(y) for x, y in zip(a, b))


def parquet_files(root):
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}


def test_compaction_replaces_small_files_and_every_reader_sees_the_same_rows(tmp_path):
    events = hostile(tmp_path)
    before, files_before = snapshot(tmp_path), len(load_state(tmp_path).files)
    clusters = set(file_clusters(tmp_path).values())
    r = maintain(tmp_path, COMPACT, NOW)
    assert r.files_compacted > 20 and r.files_written < r.files_compacted / 2
    assert same(snapshot(tmp_path), before) and before[0].height == len(events)
    assert len(load_state(tmp_path).files) == files_before - r.files_compacted + r.files_written
    assert set(file_clusters(tmp_path).values()) == clusters
    assert any("part-compacted-1-" in f.path for f in list_files(tmp_path))
    assert read_events(tmp_path).height == len(events)


def test_a_reader_that_listed_before_compaction_reads_its_files_exactly_once_within_the_grace(tmp_path):
    events = hostile(tmp_path)
    listed = list_files(tmp_path)                           # a replay listed the archive, then ...
    maintain(tmp_path, COMPACT, NOW)                        # ... compaction ran, then it reads what it listed
    rows = sum(read_file(tmp_path, f).height for f in listed)
    assert rows == len(events)
    maintain(tmp_path, COMPACT, NOW + timedelta(minutes=30))
    assert all((tmp_path / f.path).exists() for f in listed)             # still within the grace period
    r = maintain(tmp_path, COMPACT, NOW + timedelta(hours=1))
    live = {f.entry.path for f in load_state(tmp_path).files}
    assert r.retired_deleted > 20 and parquet_files(tmp_path) == live
    assert {f.path for f in listed if (tmp_path / f.path).exists()} == {f.path for f in listed} & live
    assert read_events(tmp_path, dedupe=False).height == len(events)


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_a_crash_at_any_maintenance_step_loses_and_duplicates_nothing(tmp_path, point):
    class Crash(Exception):
        pass

    def fault(p):
        if p == point:
            raise Crash(p)

    hostile(tmp_path)
    maintain(tmp_path, COMPACT.model_copy(update={"retire_grace_s": 0}), NOW)    # retired files due next run
    more = FakeLog(partitions=1)
    more.produce(all_types(12))
    archive_all(tmp_path, more, cluster_id="cluster-b", batch_max_events=2)
    before = snapshot(tmp_path)
    with pytest.raises(Crash):
        maintain(tmp_path, COMPACT.model_copy(update={"retire_grace_s": 0}), NOW, fault=fault)
    assert same(snapshot(tmp_path), before)                  # readers, right after the crash
    recover(tmp_path, "cluster-a")                           # the restart
    assert same(snapshot(tmp_path), before)
    s = load_state(tmp_path)
    assert parquet_files(tmp_path) == {f.entry.path for f in s.files} | s.retired_paths()   # no orphan left
    maintain(tmp_path, COMPACT.model_copy(update={"retire_grace_s": 0}), NOW)  # the next run finishes the job
    assert same(snapshot(tmp_path), before)


def test_the_archiver_compacts_on_its_timer(tmp_path):
    log = FakeLog(partitions=2)
    events = all_types(120)
    log.produce(events)
    stats, _ = archive_all(tmp_path, log, batch_max_events=4, compact_every_s=1.0, compact_min_files=4,
                           wall_clock=lambda: NOW)
    assert stats.checkpoints >= 1 and stats.files_compacted > 0
    assert read_latest_checkpoint(tmp_path).seq == stats.checkpoints
    df = read_events(tmp_path, dedupe=False)
    assert df.height == len(events) and set(df["event_id"]) == {e.event_id for e in events}
