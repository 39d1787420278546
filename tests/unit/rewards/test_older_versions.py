"""Input written before trajectory v4 (no group_id, no cut_short columns) reads at the current version with the
fields' defaults: archive files (the replay source) and frames carried from a cycle run by older code."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.archive.manifest import Manifest, write_manifest
from pipelines.archive.reader import conform as conform_file
from pipelines.archive.reader import read_events, read_file
from pipelines.archive.writer import EVENTS, FileEntry, events_table
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.batches import EventBatch, split_by_shard
from pipelines.rewards.frames import empty_frame, frames_from_events
from pipelines.rewards.spec import RewardSpec
from schemas import EVENT_TYPES, from_arrow, to_arrow
from schemas.events import Trajectory
from tests.unit.rewards.builders import WordClassifier, at, trajectory

ADDED_IN_V4 = ("group_id", "cut_short")


def _as_v3(table: pa.Table) -> pa.Table:
    """The table as code before v4 wrote it: without the v4 columns, version 3 in its metadata and rows."""
    table = table.drop_columns(list(ADDED_IN_V4))
    table = table.set_column(table.schema.get_field_index("schema_version"), table.schema.field("schema_version"),
                             pa.array([3] * table.num_rows, pa.int64()))
    return table.replace_schema_metadata({**table.schema.metadata, b"rtrl.schema_version": b"3"})


def _no_row_by_row(table):
    raise AssertionError("the file was upgraded row by row")


def _archive_v3_file(root, events) -> FileEntry:
    rel = "event_type=trajectory/event_date=2026-11-01/part-trajectories-0-0-1-v3.parquet"
    (root / rel).parent.mkdir(parents=True)
    pq.write_table(_as_v3(events_table([(e, i) for i, e in enumerate(events)], "trajectory", "trajectories", 0)),
                   root / rel, use_compliant_nested_type=False)
    entry = FileEntry(rel, EVENTS, len(events), 0, "trajectory", "2026-11-01")
    write_manifest(root, Manifest("v3", "trajectories", 0, 0, 0, 1, len(events), 0, {}, [entry]))
    return entry


def test_an_archive_file_written_at_v3_reads_with_the_current_defaults_column_wise(tmp_path, monkeypatch):
    events = [trajectory("a", 0, tokens=2), trajectory("b", 5, tokens=3, kind="question")]
    entry = _archive_v3_file(tmp_path, events)
    with monkeypatch.context() as m:   # v3 -> v4 -> v5 only added fields: no row goes through the model
        m.setattr("pipelines.archive.reader.from_arrow", _no_row_by_row)
        df = read_file(tmp_path, entry)
    assert df.schema == read_events(tmp_path, "trajectory").schema
    assert df["group_id"].to_list() == [None, None] and df["cut_short"].to_list() == [False, False]
    assert df["task_id"].to_list() == [None, None]
    assert df["schema_version"].to_list() == [Trajectory.SCHEMA_VERSION] * 2
    # the same rows as taking each one through the model (the path for versions with an upgrader)
    raw = pq.read_table(tmp_path / entry.path)
    by_model = to_arrow(from_arrow(raw.drop_columns(["_topic", "_partition", "_offset"])), "trajectory")
    assert df.drop("_topic", "_partition", "_offset").equals(pl.from_arrow(by_model))
    assert conform_file(raw, "trajectory").schema.metadata[b"rtrl.schema_version"] == \
        str(Trajectory.SCHEMA_VERSION).encode()


def test_a_frame_carried_from_before_v4_conforms_with_the_defaults_and_yields_reward_rows():
    old = frames_from_events([trajectory("a", 0, tokens=2)])["trajectory"].drop(ADDED_IN_V4)
    [(_, batch)] = split_by_shard(EventBatch("trajectory", old, carried=True), 1)
    assert batch.frame.schema == empty_frame("trajectory").schema
    frames = {t: empty_frame(t) for t in EVENT_TYPES} | {"trajectory": batch.frame}
    [row] = assemble_rewards(frames, RewardSpec(), WordClassifier(), at(10**6)).rows.to_dicts()
    assert (row["group_id"], row["cut_short"]) == (None, False)
