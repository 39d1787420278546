"""Data files: one per (event type, event date) per partition batch, with the Arrow schema of `schemas/`."""

from __future__ import annotations

from datetime import timedelta

import pyarrow.parquet as pq
import pytest

from pipelines.archive.batch import PartitionBatch
from pipelines.archive.deadletter import DEAD_LETTER_SCHEMA, DeadLetter
from pipelines.archive.messages import SourceMessage
from pipelines.archive.reader import event_table_schema
from pipelines.archive.writer import PROVENANCE_COLUMNS, write_partition_files
from schemas import EVENT_TYPES, arrow_schema, from_arrow
from tests.unit.archive.helpers import T0, make_event


def batch_of(events, topic="telemetry.edits", partition=1, first=100):
    pb = PartitionBatch(topic, partition, first, first + len(events) - 1)
    pb.events = [(e, first + i) for i, e in enumerate(events)]
    return pb


def test_files_are_partitioned_by_event_type_and_event_date(tmp_path):
    day2 = T0 + timedelta(days=1)
    events = [make_event("edit_applied", T0), make_event("suggestion_shown", T0), make_event("edit_applied", day2),
              make_event("edit_applied", T0)]
    entries = write_partition_files(tmp_path, batch_of(events), "rtrl-c1")
    got = {(f.event_type, f.event_date, f.rows, f.path) for f in entries}
    assert got == {
        ("edit_applied", "2026-11-01", 2,
         "event_type=edit_applied/event_date=2026-11-01/part-telemetry.edits-1-100-103-rtrl-c1.parquet"),
        ("edit_applied", "2026-11-02", 1,
         "event_type=edit_applied/event_date=2026-11-02/part-telemetry.edits-1-100-103-rtrl-c1.parquet"),
        ("suggestion_shown", "2026-11-01", 1,
         "event_type=suggestion_shown/event_date=2026-11-01/part-telemetry.edits-1-100-103-rtrl-c1.parquet"),
    }
    for f in entries:
        assert (tmp_path / f.path).stat().st_size == f.bytes
    assert not list(tmp_path.rglob(".tmp-*"))


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_on_disk_schema_is_the_arrow_schema_plus_provenance_columns(tmp_path, event_type):
    [entry] = write_partition_files(tmp_path, batch_of([make_event(event_type), make_event(event_type)]), "c")
    schema = pq.read_schema(tmp_path / entry.path)
    assert schema.equals(event_table_schema(event_type), check_metadata=True)
    data_part = schema.remove(schema.get_field_index("_offset")).remove(schema.get_field_index("_partition"))
    data_part = data_part.remove(data_part.get_field_index("_topic"))
    assert data_part.equals(arrow_schema(event_type), check_metadata=True)


def test_rows_read_back_as_the_same_events_with_their_offsets(tmp_path):
    events = [make_event("trajectory") for _ in range(3)]
    [entry] = write_partition_files(tmp_path, batch_of(events, "trajectories", 0, 7), "c")
    table = pq.read_table(tmp_path / entry.path)
    assert table.column("_offset").to_pylist() == [7, 8, 9]
    assert set(table.column("_topic").to_pylist()) == {"trajectories"}
    assert set(table.column("_partition").to_pylist()) == {0}
    assert from_arrow(table.drop_columns(list(PROVENANCE_COLUMNS))) == events


def test_dead_letters_are_written_with_their_raw_bytes_and_reason(tmp_path):
    pb = PartitionBatch("telemetry.tools", 2, 5, 5)
    m = SourceMessage("telemetry.tools", 2, 5, b"\xff\x00garbage", b"k", 1_700_000_000_123)
    pb.dead_letters = [DeadLetter(m, "invalid_json", "<event>", "<event>: not valid JSON")]
    [entry] = write_partition_files(tmp_path, pb, "c")
    assert entry.path == "_dead_letter/part-telemetry.tools-2-5-5-c.parquet" and entry.kind == "dead_letters"
    table = pq.read_table(tmp_path / entry.path)
    assert table.schema.equals(DEAD_LETTER_SCHEMA)
    row = table.to_pylist()[0]
    assert (row["value"], row["key"], row["reason"], row["offset"], row["partition"]) == (
        b"\xff\x00garbage", b"k", "invalid_json", 5, 2)
