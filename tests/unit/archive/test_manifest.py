"""The commit protocol: the manifest is the commit point; recovery deletes orphans and resumes after manifests."""

from __future__ import annotations

import json
import os

import pytest

from pipelines.archive import layout
from pipelines.archive.archiver import FAULT_POINTS
from pipelines.archive.lock import RootLock
from pipelines.archive.manifest import ArchiveError, load_manifests, recover
from pipelines.archive.reader import archived_event_ids, read_dead_letters, read_events
from schemas.events import EVENT_TYPES
from tests.unit.archive.helpers import FakeLog, all_types, archive_all, make_archiver


class Crash(Exception):
    """Stands in for SIGKILL at a commit step."""


def crash_at(point: str, on_call: int = 1):
    calls = {"n": 0}

    def fault(p: str) -> None:
        if p == point:
            calls["n"] += 1
            if calls["n"] == on_call:
                raise Crash(p)
    return fault


def parquet_files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.parquet"))


def test_manifest_lists_files_offsets_counts_and_cluster_id(tmp_path):
    log = FakeLog(partitions=1)
    events = all_types(2 * len(EVENT_TYPES))     # two of each type
    log.produce(events)
    log.append("telemetry.tools", b"not json", partition=0)
    stats, _ = archive_all(tmp_path, log, batch_max_events=1000)
    manifests = load_manifests(tmp_path)
    by_tp = {m.tp: m for m in manifests}
    tools = by_tp[("telemetry.tools", 0)]
    assert (tools.first_offset, tools.last_offset, tools.messages) == (0, 2, 3)
    assert tools.events == 2 and tools.dead_letters == {"invalid_json": 1}
    assert tools.cluster_id == "cluster-a"
    assert {f.kind for f in tools.files} == {"events", "dead_letters"}
    assert sum(m.events for m in manifests) == len(events) == stats.events_written
    listed = sorted(f.path for m in manifests for f in m.files)
    assert listed == parquet_files(tmp_path)
    assert tools.path(tmp_path) == tmp_path / "_manifests" / "cluster-a" / "telemetry.tools-0-0-2.json"


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_crash_at_any_commit_step_then_restart_loses_and_duplicates_nothing(tmp_path, point):
    log = FakeLog(partitions=2)
    events = all_types(70)
    log.produce(events)
    log.append("trajectories", b"{", partition=1)  # a dead letter in the last batch (polled last)
    # Crash in a later batch, so earlier batches are committed when it happens (the dead letter is in the last).
    a, _ = make_archiver(tmp_path, log, fault=crash_at(point, on_call=1 if point == "dead_letters_published" else 2),
                         batch_max_events=20)
    with pytest.raises(Crash):
        a.run(until_idle_s=1.0)
    archive_all(tmp_path, log, batch_max_events=20)
    df = read_events(tmp_path, dedupe=False)
    assert df.height == len(events)
    assert set(df["event_id"]) == {e.event_id for e in events}
    listed = {f.path for m in load_manifests(tmp_path) for f in m.files}
    assert set(parquet_files(tmp_path)) == listed  # no orphan survived the restart
    assert len(read_dead_letters(tmp_path)) == 1


def test_recovery_deletes_files_of_a_batch_that_crashed_before_its_manifest(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(10))
    a, _ = make_archiver(tmp_path, log, fault=crash_at("files_written"), batch_max_events=100)
    with pytest.raises(Crash):
        a.run(until_idle_s=1.0)
    orphans = parquet_files(tmp_path)
    assert orphans and not load_manifests(tmp_path)
    rec = recover(tmp_path, "cluster-a")
    assert sorted(rec.orphans_deleted) == orphans
    assert parquet_files(tmp_path) == [] and rec.positions == {}


def test_recovery_deletes_temp_files_and_keeps_manifested_ones(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(7))
    archive_all(tmp_path, log)
    kept = parquet_files(tmp_path)
    data_dir = (tmp_path / kept[0]).parent
    (data_dir / ".tmp-1234abcd-part-x.parquet").write_bytes(b"half a file")
    (tmp_path / "_manifests" / "cluster-a" / ".tmp-99-x.json").write_text("{")
    rec = recover(tmp_path, "cluster-a")
    assert len(rec.orphans_deleted) == 2
    assert parquet_files(tmp_path) == kept
    assert not list(tmp_path.rglob(".tmp-*"))


def test_resume_position_is_the_last_manifested_offset_plus_one(tmp_path):
    log = FakeLog(partitions=2)
    log.produce(all_types(30))
    archive_all(tmp_path, log, batch_max_events=7)
    expected = {tp: len(recs) for tp, recs in log.records.items()}
    assert recover(tmp_path, "cluster-a").positions == expected
    more = all_types(9)
    log.produce(more)
    a, source = make_archiver(tmp_path, log)
    stats = a.run(until_idle_s=1.0)
    assert {tp: off for tp, off in source.assigned.items() if off is not None} == expected
    assert stats.events_written == len(more)  # only the new records were read
    assert len(read_events(tmp_path, dedupe=False)) == 39


def test_a_new_cluster_id_restarts_positions_and_keeps_the_old_logs_files(tmp_path):
    old = FakeLog(partitions=1)
    old_events = all_types(10)
    old.produce(old_events)
    archive_all(tmp_path, old, cluster_id="cluster-a")
    rec = recover(tmp_path, "cluster-b")
    assert rec.positions == {} and rec.manifests == 0 and rec.manifests_other_clusters > 0
    new = FakeLog(partitions=1)  # a replaced log: offsets start at 0 again
    new_events = all_types(10)
    new.produce(new_events)
    _, source = archive_all(tmp_path, new, cluster_id="cluster-b")
    assert all(off is None for off in source.assigned.values())  # read from the beginning
    assert archived_event_ids(tmp_path) == {e.event_id for e in old_events + new_events}
    assert len(read_events(tmp_path, dedupe=False)) == 20  # same offsets, no file overwritten


def test_running_archiver_that_sees_the_cluster_id_change_abandons_the_batch_in_flight(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(5))
    a, source = make_archiver(tmp_path, log, batch_max_events=1000)
    a.start()
    a.poll_once()
    assert len(a.batch) == 5
    source.cluster = "cluster-b"
    assert a.flush() == []
    assert len(a.batch) == 0 and a.stats.abandoned_batches == 1 and a.cluster_id == "cluster-b"
    assert all(off is None for off in source.assigned.values())  # re-positioned at the new log's start
    a.close()


def test_unreadable_manifest_stops_recovery_instead_of_deleting_its_files(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(7))
    archive_all(tmp_path, log)
    files = parquet_files(tmp_path)
    m = next((tmp_path / "_manifests" / "cluster-a").glob("*.json"))
    m.write_text(json.dumps({"truncated": True}))
    with pytest.raises(ArchiveError, match="cannot read manifest"):
        recover(tmp_path, "cluster-a")
    assert parquet_files(tmp_path) == files


def test_a_second_archiver_on_the_same_root_is_refused(tmp_path):
    log = FakeLog(partitions=1)
    first, _ = make_archiver(tmp_path, log)
    first.start()
    second, _ = make_archiver(tmp_path, log)
    with pytest.raises(ArchiveError, match="another archiver"):
        second.start()
    assert RootLock.holder(tmp_path) == os.getpid()  # the first archiver's (this process) still holds it
    first.close()
    second.start()  # free once the first one let go
    second.close()


def test_layout_names_files_by_type_date_partition_offsets_and_cluster():
    from datetime import date

    assert layout.data_file("edit_applied", date(2026, 11, 1), "telemetry.edits", 2, 10, 19, "rtrl-abc") == (
        "event_type=edit_applied/event_date=2026-11-01/part-telemetry.edits-2-10-19-rtrl-abc.parquet")
    assert layout.safe("a/b c") == "a_b_c"
