"""Events as polars frames, one per event type, with the Arrow schema from `schemas/` (empty when absent).

Importing this module makes polars frames pickle as Arrow IPC (see `_reduce_frame`).
"""

from __future__ import annotations

import copyreg
from collections import defaultdict
from typing import Iterable

import polars as pl
import pyarrow as pa

from schemas import Event, arrow_schema, to_arrow
from schemas.arrow import column_defaults
from schemas.events import EVENT_TYPES


def empty_frame(event_type: str) -> pl.DataFrame:
    return pl.from_arrow(arrow_schema(event_type).empty_table())


def frames_from_events(events: Iterable[Event]) -> dict[str, pl.DataFrame]:
    by_type: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_type[e.event_type].append(e)
    return {t: pl.from_arrow(to_arrow(by_type[t], t)) if by_type.get(t) else empty_frame(t) for t in EVENT_TYPES}


def conform(frame: pl.DataFrame, event_type: str) -> pl.DataFrame:
    """Select and order exactly the schema's columns (drops provenance columns such as `_offset`). A column the
    frame lacks takes its field's default: frames made before a schema version added it (a cycle's carried join
    state, synthetic or test frames) read as the model reads such events."""
    schema = empty_frame(event_type).schema
    defaults = column_defaults(EVENT_TYPES[event_type])
    return frame.select([pl.col(n).cast(schema[n]) if n in frame.columns or n not in defaults
                         else pl.lit(defaults[n], dtype=schema[n]).alias(n) for n in schema])


def concat_frames(parts: Iterable[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Concatenate per-type frames, dropping duplicate event_ids (first copy wins)."""
    acc: dict[str, list[pl.DataFrame]] = defaultdict(list)
    for p in parts:
        for t, f in p.items():
            if f.height:
                acc[t].append(f)
    return {t: first_per_event_id(pl.concat(acc[t])) if acc.get(t) else empty_frame(t) for t in EVENT_TYPES}


def first_per_event_id(frame: pl.DataFrame) -> pl.DataFrame:
    """The first row of each event_id, order kept; the frame itself when ids are unique (the common case: no
    gather of the token lists)."""
    if frame["event_id"].n_unique() == frame.height:
        return frame
    return frame.unique("event_id", keep="first", maintain_order=True)


_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


def _frame_from_ipc(data: bytes) -> pl.DataFrame:
    return pl.from_arrow(pa.ipc.open_stream(data).read_all())


def _reduce_frame(frame: pl.DataFrame):
    """Pickle a frame as an LZ4-compressed Arrow IPC stream. Beam pickles every frame that crosses a stage or
    enters state; polars' own serialization is ~10x slower on the list columns of trajectories (token ids,
    logprobs), and without compression copying those bytes costs more than compressing them."""
    if pl.Object in frame.dtypes:
        return object.__reduce_ex__(frame, 2)  # Arrow would write object addresses: polars' own path
    try:
        table = frame.to_arrow()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=_IPC) as writer:
            writer.write_table(table)
        return _frame_from_ipc, (sink.getvalue().to_pybytes(),)
    except (pa.ArrowException, TypeError, ValueError):
        return object.__reduce_ex__(frame, 2)


copyreg.pickle(pl.DataFrame, _reduce_frame)
