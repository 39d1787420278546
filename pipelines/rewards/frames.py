"""Events as polars frames, one per event type, with the Arrow schema from `schemas/` (empty when absent)."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import polars as pl

from schemas import Event, arrow_schema, to_arrow
from schemas.events import EVENT_TYPES


def empty_frame(event_type: str) -> pl.DataFrame:
    return pl.from_arrow(arrow_schema(event_type).empty_table())


def frames_from_events(events: Iterable[Event]) -> dict[str, pl.DataFrame]:
    by_type: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        by_type[e.event_type].append(e)
    return {t: pl.from_arrow(to_arrow(by_type[t], t)) if by_type.get(t) else empty_frame(t) for t in EVENT_TYPES}


def conform(frame: pl.DataFrame, event_type: str) -> pl.DataFrame:
    """Select and order exactly the schema's columns (drops provenance columns such as `_offset`)."""
    schema = empty_frame(event_type).schema
    return frame.select([pl.col(n).cast(schema[n]) for n in schema])


def concat_frames(parts: Iterable[dict[str, pl.DataFrame]]) -> dict[str, pl.DataFrame]:
    """Concatenate per-type frames, dropping duplicate event_ids (first copy wins)."""
    acc: dict[str, list[pl.DataFrame]] = defaultdict(list)
    for p in parts:
        for t, f in p.items():
            if f.height:
                acc[t].append(f)
    return {t: (pl.concat(acc[t]).unique("event_id", keep="first", maintain_order=True) if acc.get(t)
                else empty_frame(t)) for t in EVENT_TYPES}
