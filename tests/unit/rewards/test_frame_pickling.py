"""Frames crossing Beam stages and state are pickled as LZ4 Arrow IPC (pipelines.rewards.frames)."""

import pickle
from datetime import datetime, timezone

import polars as pl
import pytest

import pipelines.rewards.frames as frames
from pipelines.rewards.synthetic import synthetic_frames


def test_every_event_frame_round_trips_through_pickle_with_its_exact_schema():
    for event_type, frame in synthetic_frames(300).items():
        back = pickle.loads(pickle.dumps(frame, pickle.HIGHEST_PROTOCOL))
        assert back.schema == frame.schema, event_type
        assert back.equals(frame), event_type


def test_pickled_frames_use_the_arrow_ipc_reducer_and_compress_token_lists():
    traj = synthetic_frames(2000)["trajectory"]
    reducer, (payload,) = frames._reduce_frame(traj)
    assert reducer is frames._frame_from_ipc
    assert len(payload) < traj.estimated_size() / 4


def test_empty_frames_and_nulls_round_trip():
    empty = frames.empty_frame("edit_applied")
    assert pickle.loads(pickle.dumps(empty)).schema == empty.schema
    f = pl.DataFrame({"t": [datetime(2026, 1, 1, tzinfo=timezone.utc), None], "xs": [[1, 2], None]})
    assert pickle.loads(pickle.dumps(f)).equals(f)


def test_object_columns_are_not_turned_into_pointer_bytes():
    """Arrow would silently write Object cells as their addresses; such frames keep polars' own behaviour."""
    f = pl.DataFrame({"o": [object(), object()]}, schema={"o": pl.Object})
    with pytest.raises(Exception, match="Object"):
        pickle.dumps(f)
