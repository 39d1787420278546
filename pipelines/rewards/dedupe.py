"""DedupeByEventIdFn: drops events whose `event_id` was already seen (client retries, replays), counted.

Keyed by shard. State: the ids seen with their event time, kept for `retention_s` of event time behind the
newest event seen (older duplicates cannot change any row that is not already emitted; they are then late).
"""

from __future__ import annotations

from datetime import timedelta

import apache_beam as beam
import polars as pl
from apache_beam.coders import PickleCoder
from apache_beam.metrics import Metrics
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec

from pipelines.rewards.batches import EventBatch
from pipelines.rewards.frames import first_per_event_id

_EMPTY = pl.DataFrame(schema={"event_id": pl.String, "event_time": pl.Datetime("us", "UTC")})


class DedupeByEventIdFn(beam.DoFn):
    SEEN = ReadModifyWriteStateSpec("seen", PickleCoder())

    def __init__(self, retention_s: float):
        self.retention = timedelta(seconds=retention_s)
        self.duplicates = Metrics.counter("rewards", "duplicates_dropped")

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
        shard, batch = element
        known: pl.DataFrame = seen.read()
        if known is None:
            known = _EMPTY
        fresh = first_per_event_id(batch.frame)
        seen_before = fresh["event_id"].is_in(known["event_id"].implode())
        if seen_before.any():
            fresh = fresh.filter(~seen_before)
        dropped = batch.frame.height - fresh.height
        if dropped:
            self.duplicates.inc(dropped)
        if fresh.is_empty():
            return
        known = pl.concat([known, fresh.select("event_id", "event_time")])
        newest = known["event_time"].max()
        seen.write(known.filter(pl.col("event_time") >= newest - self.retention))
        yield shard, EventBatch(batch.event_type, fresh, batch.carried)
