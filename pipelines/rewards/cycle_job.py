"""A cycle's reward run: the Kafka offset range since the last cycle + the open join state it left -> rows.

Join state across runs: a request's events can straddle two cycles' ranges. Each cycle keeps the open join state
(every buffered event a not-yet-mature request may need) at its end and hands it to the next (`carry`), rather
than re-reading a look-back window. A cycle emits exactly the requests whose mature time lies in
(previous cycle's as_of, this cycle's as_of], where as_of is the range's event-time watermark (its newest event
time minus the allowed lateness; idle partitions do not hold it back; no event counts later than its receipt time
plus `max_skew_s`, so one client clock cannot move the cut-off: `kafka_range.watermark_time`); so every request is
emitted by exactly one cycle.

State lives under the rewards root: a path or an object-store URL (schemas.storage; every write atomic), so a
runner's workers need no shared disk. Crash safety. The manifest `<state>/rewards/cycles/<cycle_id>.json` is
written first with the fixed range
(status "started"), then the Beam job writes the reward partitions (idempotent overwrite), the carry and the
dead letters (`<state>/rewards/dead_letter/<cycle_id>.parquet`, the archive's dead-letter schema; the archiver
publishes the same messages to the dead-letter topic, so this job does not publish them twice), then the manifest
says "done". A started cycle is only resumed against the Kafka cluster its offsets refer to. Rerunning a started cycle reads the same range with the same carry
and writes the same files; rerunning a done cycle does nothing. A carry is read by the one cycle after it: once that
cycle is done, the carry is removed (pipelines.rewards.carry, after each orchestrated cycle).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone

import apache_beam as beam
import polars as pl
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.rewards import progress
from pipelines.rewards.batches import DEFAULT_SHARDS, EventBatch
from pipelines.rewards.bounded import BoundedRewards, Sink, read_summary, run_to_end
from pipelines.rewards.cycle_store import CycleManifest, CycleStore
from pipelines.rewards.kafka_range import (MAX_SKEW_S, FixedRange, ReadRangeItemsFn, cluster_id, fix_range,
                                           parse_key, range_watermark)
from pipelines.rewards.spec import RewardSpec
from schemas import storage
from schemas.kafka_clients import KafkaTarget, bootstrap_of
from schemas.storage import Location
from schemas.topics import EVENT_TOPICS


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(timezone.utc).isoformat()


def _dt(s: str | None) -> datetime | None:
    return None if s is None else datetime.fromisoformat(s)


def start_after(prev: CycleManifest | None, bootstrap: KafkaTarget, log=None) -> dict[str, int]:
    """Where the range after `prev` starts: its stop offsets, or the log's beginning when the cluster is another
    incarnation than the one those offsets refer to (a broker over memory storage restarted: its offsets start
    over; what the old log held past `prev` is only in the event archive, for a replay)."""
    if prev is None:
        return {}
    was = prev.range.get("cluster_id")
    if was and (now := cluster_id(bootstrap)) and now != was:
        if log:
            log(f"rewards: Kafka cluster {now} is a new log, not {was} that cycle {prev.cycle_id}'s offsets refer "
                "to: reading it from its beginning")
        return {}
    return prev.range["stop"]


def plan(store: CycleStore, cycle_id: str, bootstrap: KafkaTarget, spec: RewardSpec, idle_s: float, log,
         max_skew_s: float = MAX_SKEW_S) -> CycleManifest:
    """The manifest of `cycle_id`: an existing one, or a new one with the range fixed now."""
    existing = store.load(cycle_id)
    if existing is not None:
        return existing
    prev = store.latest_done()
    start = start_after(prev, bootstrap, log)
    log(f"rewards: fixing the range of cycle {cycle_id} (after {prev.cycle_id if prev else 'the beginning'})")
    r = fix_range(bootstrap, EVENT_TOPICS, start, idle_s, progress=lambda n: progress.put("range_records", n),
                  max_skew_s=max_skew_s)
    after = _dt(prev.as_of) if prev else None
    wm = range_watermark(r, spec.allowed_lateness_s)
    as_of = max(t for t in (after, wm) if t is not None) if (after or wm) else None
    m = CycleManifest(cycle_id, (prev.seq + 1) if prev else 1, "started", prev.cycle_id if prev else None,
                      asdict(r), _iso(after), _iso(as_of), spec.version())
    store.save(m)
    return m


NOTHING_MATURE = datetime(1970, 1, 1, tzinfo=timezone.utc)


class ReadCarryFn(beam.DoFn):
    def process(self, loc: str):
        frame = pl.from_arrow(storage.read_parquet(loc))
        if frame.height:
            yield EventBatch(storage.name(loc).removesuffix(".parquet"), frame, carried=True)


def run_cycle(cycle_id: str, bootstrap: KafkaTarget, state_root: Location, out: Location, spec: RewardSpec,
              shards: int | None = None, idle_s: float = 2.0, beam_args: list[str] | None = None, log=print,
              max_skew_s: float = MAX_SKEW_S) -> CycleManifest:
    """`max_skew_s`: how far past its receipt time an event's time may count for the cut-off (see kafka_range)."""
    store = CycleStore(state_root)
    m = plan(store, cycle_id, bootstrap, spec, idle_s, log, max_skew_s)
    if m.status == "done":
        log(f"rewards: cycle {cycle_id} is already done ({sum(n for _, n in m.partitions)} rows); nothing to do")
        return m
    if m.spec_version != spec.version():
        raise ValueError(f"cycle {cycle_id} was started with reward spec {m.spec_version}; this run has "
                         f"{spec.version()}: finish it with the same spec, or replay with the new one")
    prev = store.load(m.previous) if m.previous else None
    carry_in = store.carry_files(prev.cycle_id) if prev else []
    r = FixedRange(**m.range)
    progress.put("events_total", r.records)
    if r.cluster_id and (now := cluster_id(bootstrap)) != r.cluster_id:
        raise ValueError(f"cycle {cycle_id}'s range refers to Kafka cluster {r.cluster_id}, but "
                         f"{bootstrap_of(bootstrap)} is {now}: the log those offsets point into is gone (replay the "
                         "archive instead)")
    log(f"rewards: cycle {cycle_id}: {r.records} records in range, carry from {m.previous or 'nothing'}, "
        f"emitting rows maturing in ({m.after}, {m.as_of}]")
    sink = Sink(table=str(out), window=cycle_id, result=str(store.result_path(cycle_id)),
                carry=str(store.carry_dir(cycle_id)), dead_letters=str(store.dead_letter_path(cycle_id)),
                cluster_id=r.cluster_id)
    # no watermark yet (nothing valid in range or carried): nothing is mature, everything is carried
    as_of = _dt(m.as_of) or _dt(m.after) or NOTHING_MATURE
    p = beam.Pipeline(options=PipelineOptions(beam_args or ["--runner=DirectRunner"]))
    ranges = [(*parse_key(k), r.start.get(k, 0), r.stop[k]) for k in sorted(r.stop)]
    read = (p | "Ranges" >> beam.Create(ranges, reshuffle=False)
            | "ReadRanges" >> beam.ParDo(ReadRangeItemsFn(bootstrap, _dt(m.after))))
    carried = p | "CarryFiles" >> beam.Create(carry_in, reshuffle=False) | "ReadCarry" >> beam.ParDo(ReadCarryFn())
    _ = ((read, carried) | "Merge" >> beam.Flatten()
         | "Rewards" >> BoundedRewards(spec, shards or DEFAULT_SHARDS, as_of, sink, after=_dt(m.after)))
    run_to_end(p)
    summary = read_summary(sink)
    m.counters = summary["counters"]
    m.partitions = [tuple(x) for x in summary["partitions"]]
    m.status = "done"
    store.save(m)
    log(f"rewards: cycle {cycle_id} done: {sum(n for _, n in m.partitions)} rows")
    return m

