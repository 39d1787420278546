"""ComputeRewards: events (parsed `Event`s or `EventBatch`es) -> mature reward rows (+ the open join state).

    rows, carry = events | ComputeRewards(spec, shards=16, as_of=None)

The same composite serves every source: streaming (TestStream, or an unbounded Kafka read on a portable
runner), a bounded Kafka offset range, and replay of the Parquet event log.
"""

from __future__ import annotations

from datetime import datetime

import apache_beam as beam

from pipelines.rewards.assemble_fn import CARRY, AssembleRewardsFn
from pipelines.rewards.batches import EventBatch, batch_of_event, split_by_shard
from pipelines.rewards.dedupe import DedupeByEventIdFn
from pipelines.rewards.spec import RewardSpec


class BatchByShard(beam.PTransform):
    """Event or EventBatch -> (shard, EventBatch): workspaces hashed into `shards` groups."""

    def __init__(self, shards: int):
        super().__init__()
        self.shards = shards

    def expand(self, events):
        shards = self.shards
        return events | "Shard" >> beam.FlatMap(
            lambda e: split_by_shard(e if isinstance(e, EventBatch) else batch_of_event(e), shards))


class ComputeRewards(beam.PTransform):
    def __init__(self, spec: RewardSpec, shards: int = 16, as_of: datetime | None = None,
                 after: datetime | None = None):
        """as_of: emit only rows maturing by then (bounded runs); after: rows maturing by then were emitted by an
        earlier run whose open state this run continues (cycle runs)."""
        super().__init__()
        self.spec, self.shards, self.as_of, self.after = spec, shards, as_of, after

    def expand(self, events):
        retention = self.spec.maturity_delay_s(question=True) + self.spec.followup_window_s
        out = (events
               | "BatchByShard" >> BatchByShard(self.shards)
               | "Dedupe" >> beam.ParDo(DedupeByEventIdFn(retention))
               | "Assemble" >> beam.ParDo(AssembleRewardsFn(self.spec, self.as_of, self.after)).with_outputs(CARRY, main="rows"))
        return out.rows, out[CARRY]
