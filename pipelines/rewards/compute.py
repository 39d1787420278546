"""ComputeRewards: events (parsed `Event`s or `EventBatch`es) -> mature reward rows (+ the open join state and the
background tasks' outcome rows).

    rows, carry, outcomes = events | ComputeRewards(spec, shards=4, as_of=None)

The same composite serves every source: streaming (TestStream, or an unbounded Kafka read on a portable
runner), a bounded Kafka offset range, and replay of the Parquet event log.
"""

from __future__ import annotations

from datetime import datetime

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from pipelines.rewards.assemble_fn import CARRY, OUTCOMES, AssembleRewardsFn
from pipelines.rewards.batches import DEFAULT_SHARDS, EventBatch, micros, split_by_shard
from pipelines.rewards.lateness import DropLateFn
from pipelines.rewards.spec import RewardSpec


class BatchEventsFn(beam.DoFn):
    """Parsed `Event`s -> EventBatches of one event type, at most `max_events` each, the rest at the end of the
    bundle (batches pass through), so the stateful steps downstream handle frames, not single events, and a large
    bundle never holds more than `max_events` parsed events per type."""

    def __init__(self, max_events: int = 2000):
        self.max_events = max_events

    def start_bundle(self):
        self.pending: dict[str, list] = {}

    def _batch(self, event_type: str) -> WindowedValue:
        batch = EventBatch.of(event_type, self.pending.pop(event_type))
        return WindowedValue(batch, Timestamp(micros=micros(batch.min_time)), [GlobalWindow()])

    def process(self, e):
        if isinstance(e, EventBatch):
            yield e
            return
        events = self.pending.setdefault(e.event_type, [])
        events.append(e)
        if len(events) >= self.max_events:
            yield self._batch(e.event_type)

    def finish_bundle(self):
        for event_type in sorted(self.pending):
            yield self._batch(event_type)


class BatchByShard(beam.PTransform):
    """Event or EventBatch -> (shard, EventBatch): workspaces hashed into `shards` groups."""

    def __init__(self, shards: int):
        super().__init__()
        self.shards = shards

    def expand(self, events):
        shards = self.shards
        return (events | "Batch" >> beam.ParDo(BatchEventsFn())
                | "Shard" >> beam.FlatMap(lambda b: split_by_shard(b, shards)))


class ComputeRewards(beam.PTransform):
    def __init__(self, spec: RewardSpec, shards: int | None = None, as_of: datetime | None = None,
                 after: datetime | None = None):
        """as_of: emit only rows maturing by then (bounded runs); after: rows maturing by then were emitted by an
        earlier run whose open state this run continues (cycle runs)."""
        super().__init__()
        self.spec, self.as_of, self.after = spec, as_of, after
        self.shards = shards or DEFAULT_SHARDS

    def expand(self, events):
        if self.after is not None:  # every new input reached this run after the previous firing (lateness.py)
            events = events | "DropLate" >> beam.ParDo(DropLateFn(self.after))
        out = (events
               | "BatchByShard" >> BatchByShard(self.shards)
               | "Assemble" >> beam.ParDo(AssembleRewardsFn(self.spec, self.as_of, self.after))
               .with_outputs(CARRY, OUTCOMES, main="rows"))
        return out.rows, out[CARRY], out[OUTCOMES]


def run_and_count(p: beam.Pipeline) -> dict[str, int]:
    """Run a pipeline to completion; its committed counters by name (summed over steps)."""
    result = p.run()
    result.wait_until_finish()
    counters: dict[str, int] = {}
    for c in result.metrics().query()["counters"]:
        counters[c.key.metric.name] = counters.get(c.key.metric.name, 0) + int(c.committed or 0)
    return counters
