"""The bounded form of the reward join, for cycle and replay runs on any Beam runner: a GroupByKey by shard
instead of state and timers.

    items | BoundedRewards(spec, shards, as_of, after, sink)      -> one summary dict, also written to sink.result

The input is a PCollection of source items: `EventBatch`es (late input already dropped, see lateness.py),
`("counts", {name: n})` and `("dead", DeadLetter)`. Shards are grouped once; each group computes what the
stateful form (`AssembleRewardsFn` with `as_of`) computes at the end of a bounded input -- the same dedupe (first
copy wins), the same rows maturing in (after, as_of], the same carry and pending count -- in one call. Then the
outputs are grouped by destination and written by the workers (reward partitions, carry, dead letters), and
their results meet in one last step that writes the summary.

Why this shape: a distributed runner's workers share no memory and no disk, and the runners this must work on do
not all support state, timers, tagged outputs or metrics (Beam's DaskRunner supports none of them and computes
only the pipeline's last step). So every output travels as data, the counters included, and the pipeline is one
chain that ends in the summary. Tests compare it with the stateful form row for row (tests/unit/rewards).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

import apache_beam as beam
import polars as pl

from pipelines.rewards.assemble import assemble_rewards, reward_maturity
from pipelines.rewards.batches import EventBatch, split_by_shard
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.frames import concat_frames
from pipelines.rewards.outcomes import assemble_outcomes, keep_mask
from pipelines.rewards.sink import write_carry, write_dead_letters, write_partition
from pipelines.rewards.spec import RewardSpec
from schemas import storage

COUNTS, DEAD, ROWS, CARRY, OUTCOMES = "counts", "dead", "rows", "carry", "outcomes"


def maturities(traj: pl.DataFrame, spec: RewardSpec) -> pl.Series:
    """Mature time of each trajectory row (aligned with the frame); null for privacy-mode rows."""
    return traj.select(pl.when(pl.col("privacy_mode")).then(None).otherwise(reward_maturity(spec))).to_series()


def keep_for(spec: RewardSpec) -> timedelta:
    """How long behind a firing an event can still be needed by a request that is not mature yet."""
    return timedelta(seconds=spec.maturity_delay_s(question=True) + spec.followup_window_s)


def prune(frames: dict[str, pl.DataFrame], fire_at: datetime, spec: RewardSpec) -> dict[str, pl.DataFrame]:
    """What the join keeps after a firing at `fire_at`: every event that a request not mature yet may need
    (`keep_for`), and background tasks' trajectories and outcomes for the long horizon (outcomes.keep_mask)."""
    horizon = fire_at - keep_for(spec)
    kept = {}
    for t, f in frames.items():
        keep = f["event_time"] >= horizon
        longer = keep_mask(f, t, fire_at, spec)
        kept[t] = f.filter(keep if longer is None else keep | longer)
    return kept


def pending_outcomes(frames: dict[str, pl.DataFrame], spec: RewardSpec, as_of: datetime) -> int:
    """Task requests in the buffer whose outcome row is not out by `as_of`."""
    rows, _ = assemble_outcomes(frames, spec, None)
    return int((rows["mature_time"] > as_of).sum())


def kept_requests(frames: dict[str, pl.DataFrame], keep: Callable[[pl.DataFrame], pl.DataFrame]) \
        -> dict[str, pl.DataFrame]:
    """`frames` with only the trajectories whose rows `keep` writes (a replay's range): what its pending counts
    count."""
    traj = frames["trajectory"]
    return frames | {"trajectory": keep(traj.with_columns(request_time=pl.col("event_time"))).drop("request_time")}


def by_shard(item, shards: int):
    """A source item -> (group key, value): event batches by shard, counts and dead letters by kind."""
    if isinstance(item, EventBatch):
        return [(f"shard-{s}", b) for s, b in split_by_shard(item, shards)]
    return [item]


@dataclass(frozen=True)
class ShardJoin:
    """What one shard's group computes (a picklable callable for FlatMap)."""
    spec: RewardSpec
    as_of: datetime
    after: datetime | None = None
    keep: Callable[[pl.DataFrame], pl.DataFrame] | None = None   # a filter on the rows written (replay's range)
    carry: bool = True                                            # emit the open join state

    def __call__(self, group):
        key, values = group
        if not key.startswith("shard-"):
            yield from ((key, v) for v in values)
            return
        batches = list(values)
        # the carry first, as the stateful form's buffer holds it before new input: the first copy of an event wins
        batches.sort(key=lambda b: not b.carried)
        total = sum(b.frame.height for b in batches)
        frames = concat_frames({b.event_type: b.frame} for b in batches)
        counts = {"duplicates_dropped": total - sum(f.height for f in frames.values())}
        if self.after is None or self.as_of > self.after:
            out = assemble_rewards(frames, self.spec, get_classifier(self.spec.classifier), self.as_of, self.after)
            rows = out.rows if self.keep is None else self.keep(out.rows)
            # the counters count the rows written (a replay reads past its range, whose rows it does not write)
            counts["rows_emitted"] = rows.height
            counts["unknown_labels"] = int((rows["persistence_label"] == "unknown").sum())
            for (version,), part in sorted(rows.partition_by("policy_version", as_dict=True).items()):
                yield ROWS, (version, part)
            outcomes, _ = assemble_outcomes(frames, self.spec, self.as_of, self.after)
            outcomes = outcomes if self.keep is None else self.keep(outcomes)
            counts["outcome_rows"] = outcomes.height
            counts["outcome_unknown"] = int((outcomes["outcome_label"] == "unknown").sum())
            for (version,), part in sorted(outcomes.partition_by("policy_version", as_dict=True).items()):
                yield OUTCOMES, (version, part)
            frames = prune(frames, self.as_of, self.spec)
        held = frames if self.keep is None else kept_requests(frames, self.keep)
        pending = maturities(held["trajectory"], self.spec) > self.as_of
        counts["requests_pending"] = int(pending.fill_null(False).sum())
        counts["outcomes_pending"] = pending_outcomes(held, self.spec, self.as_of)
        for t in sorted(frames) if self.carry else ():
            if frames[t].height:
                yield CARRY, EventBatch(t, frames[t], carried=True)
        yield COUNTS, counts


@dataclass(frozen=True)
class Sink:
    """Where a bounded run's outputs go (paths or object-store URLs, schemas.storage). `table`/`window`: the
    reward table and the partition label; `carry`: the open join state's folder (None: not kept, as in a
    replay); `dead_letters`: the run's dead-letter file (None: none expected); `result`: the summary file the
    driver reads."""
    table: str
    window: str
    result: str
    carry: str | None = None
    dead_letters: str | None = None
    cluster_id: str = ""


@dataclass(frozen=True)
class WriteGroup:
    sink: Sink

    def __call__(self, group):
        key, values = group
        kind, version = key if isinstance(key, tuple) else (key, None)
        if kind == ROWS:
            return "partitions", [write_partition(self.sink.table, self.sink.window, version, values)]
        if kind == OUTCOMES:
            return "outcome_partitions", [write_partition(self.sink.table, self.sink.window, version, values,
                                                          outcomes=True)]
        if kind == CARRY:
            return CARRY, write_carry(self.sink.carry, values) if self.sink.carry else 0
        if kind == DEAD:
            return DEAD, write_dead_letters(self.sink.dead_letters, values, self.sink.cluster_id) \
                if self.sink.dead_letters else 0
        total: dict[str, int] = {}
        for c in values:
            for name, n in c.items():
                total[name] = total.get(name, 0) + int(n)
        return COUNTS, total


def destination(item):
    kind, value = item
    if kind in (ROWS, OUTCOMES):
        return (kind, value[0]), value[1]
    return kind, value


@dataclass(frozen=True)
class Finish:
    sink: Sink

    def __call__(self, group) -> dict:
        _, results = group
        summary: dict = {"partitions": [], "outcome_partitions": [], "counters": {}, "carried": 0, "dead_letters": 0}
        for kind, value in results:
            if kind in ("partitions", "outcome_partitions"):
                summary[kind] += value
            elif kind == COUNTS:
                summary["counters"] = value
            elif kind == CARRY:
                summary["carried"] = value
            elif kind == DEAD:
                summary["dead_letters"] = value
        for kind in ("partitions", "outcome_partitions"):
            summary[kind] = sorted(list(p) for p in summary[kind])
        storage.write_text(self.sink.result, json.dumps(summary, indent=2, sort_keys=True))
        return summary


class BoundedRewards(beam.PTransform):
    """Source items -> rows, carry and dead letters written to `sink`; the summary written to `sink.result`."""

    def __init__(self, spec: RewardSpec, shards: int, as_of: datetime, sink: Sink, after: datetime | None = None,
                 keep: Callable[[pl.DataFrame], pl.DataFrame] | None = None):
        super().__init__()
        self.spec, self.shards, self.as_of, self.after, self.sink, self.keep = spec, shards, as_of, after, sink, keep

    def expand(self, items):
        shards = self.shards
        seed = items.pipeline | "NoCounts" >> beam.Create([(COUNTS, {})], reshuffle=False)
        return ((items | "ByShard" >> beam.FlatMap(by_shard, shards), seed)
                | "WithSeed" >> beam.Flatten()
                | "GroupShards" >> beam.GroupByKey()
                | "Join" >> beam.FlatMap(ShardJoin(self.spec, self.as_of, self.after, self.keep,
                                                   carry=self.sink.carry is not None))
                | "ByDestination" >> beam.Map(destination)
                | "GroupDestinations" >> beam.GroupByKey()
                | "Write" >> beam.Map(WriteGroup(self.sink))
                | "One" >> beam.Map(lambda r: (None, r))
                | "GroupResults" >> beam.GroupByKey()
                | "Summary" >> beam.Map(Finish(self.sink)))


def run_to_end(p: beam.Pipeline) -> None:
    """Run a pipeline to completion (and close the client a distributed runner opened for it)."""
    result = p.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)   # the DaskRunner's dask.distributed client
        if client is not None:
            client.close()


def read_summary(sink: Sink) -> dict:
    return json.loads(storage.read_text(sink.result))

