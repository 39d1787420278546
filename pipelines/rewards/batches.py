"""The unit that flows through the reward job: a batch of events of one type for one shard.

Batches (polars frames with the Arrow schema of `schemas/`) keep per-event Python work out of the hot path: the
replay source reads a Parquet file into batches, streaming sources wrap each parsed event in a one-row batch.
Shards group workspaces: every join of the reward spec stays inside one workspace, so one shard's state holds
everything its requests need.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from zlib import crc32

import polars as pl

from pipelines.rewards.frames import conform
from schemas import to_arrow


@dataclass(frozen=True)
class EventBatch:
    event_type: str
    frame: pl.DataFrame
    carried: bool = False   # handed over by the previous cycle's run (its open join state), not new input

    @classmethod
    def of(cls, event_type: str, events: list) -> "EventBatch":
        """A batch of parsed `Event`s of one type."""
        return cls(event_type, pl.from_arrow(to_arrow(events, event_type)))

    @property
    def min_time(self) -> datetime:
        return self.frame["event_time"].min()


DEFAULT_SHARDS = 4  # state keys; raise it for a distributed runner's parallelism


def shard_of(workspace_id: str, shards: int) -> int:
    return crc32(workspace_id.encode()) % shards


def split_by_shard(batch: EventBatch, shards: int) -> list[tuple[int, EventBatch]]:
    """(shard, batch) pairs; stable order (by shard) so reruns produce the same elements."""
    frame = conform(batch.frame, batch.event_type)
    if frame.is_empty():
        return []
    ids = frame["workspace_id"].unique().to_list()
    lookup = pl.DataFrame({"workspace_id": ids, "_shard": [shard_of(w, shards) for w in ids]},
                          schema={"workspace_id": pl.String, "_shard": pl.Int64})
    keyed = frame.join(lookup, on="workspace_id", how="left", maintain_order="left")
    return [(int(key[0]), EventBatch(batch.event_type, part.drop("_shard"), batch.carried))
            for key, part in sorted(keyed.partition_by("_shard", as_dict=True).items())]


def micros(t: datetime) -> int:
    return int(t.replace(tzinfo=t.tzinfo or timezone.utc).timestamp() * 1_000_000)
