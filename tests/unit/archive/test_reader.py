"""Reading the event log: only committed files, deduped by event_id, filtered by event time, typed per schema."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.archive.manifest import Manifest, write_manifest
from pipelines.archive.reader import archived_event_ids, event_table_schema, read_events
from pipelines.archive.writer import EVENTS, FileEntry, events_table
from schemas import CURRENT_VERSIONS, arrow_schema
from schemas.events import EVENT_TYPES
from tests.unit.archive.helpers import FIXTURES, T0, FakeLog, all_types, archive_all, make_event


def test_reads_only_files_listed_by_a_manifest(tmp_path):
    log = FakeLog(partitions=1)
    events = all_types(7)
    log.produce(events)
    archive_all(tmp_path, log)
    # A batch in flight (durable file, no manifest yet) must be invisible to readers.
    stray = [make_event("edit_applied")]
    day_dir = tmp_path / "event_type=edit_applied" / "event_date=2026-11-01"
    pq.write_table(events_table([(stray[0], 99)], "edit_applied", "telemetry.edits", 0),
                   day_dir / "part-telemetry.edits-0-99-99-cluster-a.parquet")
    assert set(read_events(tmp_path)["event_id"]) == {e.event_id for e in events}
    assert archived_event_ids(tmp_path) == {e.event_id for e in events}


def test_dedupe_keeps_one_row_per_event_id_unless_asked_not_to(tmp_path):
    log = FakeLog(partitions=1)
    e = make_event("followup_message")
    log.produce([e])
    archive_all(tmp_path, log, dedupe_window=0)  # archive forgets: the retry below is archived again
    log.produce([e, make_event("followup_message")])
    archive_all(tmp_path, log, dedupe_window=0)
    raw = read_events(tmp_path, dedupe=False)
    assert raw.height == 3 and raw["event_id"].to_list().count(e.event_id) == 2
    deduped = read_events(tmp_path)
    assert deduped.height == 2 and deduped["event_id"].n_unique() == 2
    kept = deduped.filter(pl.col("event_id") == e.event_id)
    assert kept["_offset"].to_list() == [0]  # the first copy, deterministically


def test_time_range_is_start_inclusive_end_exclusive(tmp_path):
    times = [T0, T0 + timedelta(hours=1), T0 + timedelta(days=1), T0 + timedelta(days=2)]
    events = [make_event("codebase_snapshot", t) for t in times]
    log = FakeLog(partitions=1)
    log.produce(events)
    archive_all(tmp_path, log)
    df = read_events(tmp_path, "codebase_snapshot", start=times[1], end=times[3])
    assert df["event_id"].to_list() == [events[1].event_id, events[2].event_id]
    assert read_events(tmp_path, start=times[3]).height == 1
    assert read_events(tmp_path, end=times[0]).height == 0


def test_naive_bounds_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="timezone-aware"):
        read_events(tmp_path, start=datetime(2026, 1, 1))


def test_one_type_has_its_arrow_schema_and_all_types_share_the_envelope(tmp_path):
    log = FakeLog(partitions=2)
    events = all_types(3 * len(EVENT_TYPES))
    log.produce(events)
    archive_all(tmp_path, log)
    traj = read_events(tmp_path, "trajectory")
    expected = pl.from_arrow(event_table_schema("trajectory").empty_table()).schema
    assert traj.schema == expected and traj.height == sum(e.event_type == "trajectory" for e in events) >= 2
    everything = read_events(tmp_path)
    assert everything.height == len(events) and set(everything["event_type"]) == {e.event_type for e in events}
    assert everything.schema["event_time"] == pl.Datetime("us", "UTC")
    assert everything["event_time"].is_sorted()


def test_empty_archive_gives_an_empty_typed_frame(tmp_path):
    assert read_events(tmp_path, "tool_call_result").schema == pl.from_arrow(
        event_table_schema("tool_call_result").empty_table()).schema
    assert read_events(tmp_path).height == 0 and "event_id" in read_events(tmp_path).columns


def test_files_written_at_an_older_schema_version_read_at_the_current_one(tmp_path):
    v1 = json.loads((FIXTURES / "trajectory" / "v1.json").read_text())
    current = arrow_schema("trajectory")
    old_fields = [f for f in current if f.name in v1 or f.name == "received_time" or f.name == "event_date"]
    old_fields = [f for f in old_fields if f.name not in ("temperature", "top_p", "top_k")]
    old_schema = pa.schema(old_fields, metadata={b"rtrl.event_type": b"trajectory", b"rtrl.schema_version": b"1"})
    row = {**v1, "event_time": T0, "received_time": None, "event_date": T0.date()}
    table = pa.Table.from_pylist([row], schema=old_schema)
    table = (table.append_column(pa.field("_topic", pa.string(), False), pa.array(["trajectories"]))
             .append_column(pa.field("_partition", pa.int32(), False), pa.array([0], pa.int32()))
             .append_column(pa.field("_offset", pa.int64(), False), pa.array([0], pa.int64())))
    rel = "event_type=trajectory/event_date=2026-11-01/part-trajectories-0-0-0-old.parquet"
    (tmp_path / rel).parent.mkdir(parents=True)
    pq.write_table(table, tmp_path / rel)
    write_manifest(tmp_path, Manifest("old", "trajectories", 0, 0, 0, 1, 1, 0, {},
                                      [FileEntry(rel, EVENTS, 1, 0, "trajectory", "2026-11-01")]))
    df = read_events(tmp_path, "trajectory")
    assert df.schema == pl.from_arrow(event_table_schema("trajectory").empty_table()).schema
    assert df.row(0, named=True)["schema_version"] == CURRENT_VERSIONS["trajectory"]
    assert (df["temperature"][0], df["top_p"][0], df["top_k"][0]) == (1.0, 1.0, -1)
