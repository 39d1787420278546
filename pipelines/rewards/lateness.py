"""Late data, one rule for every job and every event type: an event whose time is before the cut-off in force when
it reached the job is late -- dropped and counted (`late_requests` for trajectories, `late_events` for every other
type; a late `task_outcome` also counts in `late_outcomes`). A `task_outcome` meets the same cut-off as any other
event: `outcome_lateness_s` delays its outcome rows, it does not let it arrive later.

The cut-off is the last firing: the time up to which rows are already out. A cycle's firing is its `as_of`, the
range's watermark (its newest event time, bounded by receipt + skew) minus the allowed lateness; so an event is
late exactly when it is more than `allowed_lateness_s` behind the watermark the job had when it arrived, whatever
its type. A late event can change no emitted row, and an event that is not late is after every emitted request's
maturity: nothing is silently ignored. Late copies are dropped before deduplication, so a retry that arrives
after the cut-off is counted late and never displaces the copy the join already holds.

Who knows the cut-off of an event:
- a cycle run: every event of its Kafka range reached it after the previous cycle's firing (`after`); the
  carried join state is not new input and is never late (`DropLateFn`);
- the streaming job: the last firing of its shard (`AssembleRewardsFn`, same rule);
- a replay (`ReplayCuts`): the archive keeps each event's Kafka position and `received_time`. An event in the
  range of a live cycle recorded in the rewards state gets that cycle's `after`, so a replay of the live
  cycles' window drops and counts exactly what they did. An event no recorded cycle read is judged by its
  receipt: the cut-off is the newest watermark time among the events received before it, minus the allowed
  lateness -- what a job firing continuously would have had.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

import apache_beam as beam
import polars as pl
from apache_beam.metrics import Metrics

from pipelines.rewards.batches import EventBatch
from schemas import storage
from schemas.storage import Location

LATE_REQUESTS, LATE_EVENTS, LATE_OUTCOMES = "late_requests", "late_events", "late_outcomes"
_TIME = pl.Datetime("us", "UTC")


def late_counter(event_type: str) -> str:
    return LATE_REQUESTS if event_type == "trajectory" else LATE_EVENTS


def late_counts(event_type: str, n: int) -> dict[str, int]:
    """What `n` late events of `event_type` add to the counters: `late_requests` (trajectories) or `late_events`
    (every other type), and for `task_outcome` also `late_outcomes` (a part of `late_events`)."""
    counts = {late_counter(event_type): n}
    if event_type == "task_outcome":
        counts[LATE_OUTCOMES] = n
    return counts


def count_late(event_type: str, n: int) -> None:
    if n:
        for name, k in late_counts(event_type, n).items():
            Metrics.counter("rewards", name).inc(k)


class DropLateFn(beam.DoFn):
    """Drops and counts the new input (parsed `Event`s or uncarried `EventBatch`es) older than `cut`."""

    def __init__(self, cut: datetime):
        self.cut = cut

    def process(self, e):
        if isinstance(e, EventBatch):
            if e.carried:
                yield e
                return
            late = e.frame["event_time"] < self.cut
            n = int(late.sum())
            count_late(e.event_type, n)
            if n < e.frame.height:
                yield EventBatch(e.event_type, e.frame.filter(~late) if n else e.frame, e.carried)
            return
        if e.event_time < self.cut:
            count_late(e.event_type, 1)
        else:
            yield e


@dataclass(frozen=True)
class CycleSpan:
    """Offsets [start, stop) of one partition that a cycle read, and the cut-off in force for them."""
    cluster_id: str | None
    topic: str
    partition: int
    start: int
    stop: int
    after: datetime | None      # None: the first cycle (nothing fired before it)


def cycle_spans(rewards_state: Location | None) -> list[CycleSpan]:
    """Every partition range of the done cycles recorded under `rewards_state` (the cycle job's state root: a
    path or an object-store URL)."""
    if rewards_state is None:
        return []
    spans = []
    for f in storage.list_files(storage.join(rewards_state, "cycles"), "*.json", recursive=False):
        m = json.loads(storage.read_text(f.loc))
        if m.get("status") != "done":
            continue
        r, after = m["range"], m.get("after")
        for key, stop in r.get("stop", {}).items():
            topic, _, part = key.rpartition("/")
            start = r.get("start", {}).get(key, 0)
            if stop > start:
                spans.append(CycleSpan(r.get("cluster_id") or None, topic, int(part), start, stop,
                                       datetime.fromisoformat(after) if after else None))
    return spans


def receipt_cuts(times: pl.DataFrame, allowed_lateness_s: float, max_skew_s: float) -> pl.DataFrame:
    """(received_time, cut) steps from every event's (event_time, received_time): the cut-off for an event
    received after `received_time` (and up to the next step) is the newest watermark time (event time, at most
    receipt + `max_skew_s`) among the events received up to then, minus the allowed lateness. Events without a
    receipt time neither move nor meet a cut-off."""
    t = times.drop_nulls(["event_time", "received_time"])
    mark = pl.min_horizontal("event_time", pl.col("received_time") + timedelta(seconds=max_skew_s))
    return (t.group_by("received_time").agg(mark.max().alias("mark")).sort("received_time")
            .select("received_time",
                    (pl.col("mark").cum_max() - timedelta(seconds=allowed_lateness_s)).alias("cut")))


class ReplayCuts:
    """The cut-off of each archived event for a replay: its live cycle's `after`, else by its receipt."""

    def __init__(self, spans: list[CycleSpan], receipts: pl.DataFrame | None):
        self.spans = spans
        self.receipts = receipts if receipts is not None else pl.DataFrame(
            schema={"received_time": _TIME, "cut": _TIME})

    def _span_cuts(self, frame: pl.DataFrame, cluster_id: str | None) -> pl.DataFrame:
        """Per row: covered (bool) and the covering cycle's cut (null when it is the first cycle)."""
        covered = pl.repeat(False, frame.height, eager=True)
        cut = pl.repeat(None, frame.height, dtype=_TIME, eager=True)
        for s in self.spans:
            if s.cluster_id is not None and cluster_id is not None and s.cluster_id != cluster_id:
                continue
            hit = ((frame["_topic"] == s.topic) & (frame["_partition"] == s.partition)
                   & (frame["_offset"] >= s.start) & (frame["_offset"] < s.stop))
            if hit.any():
                covered = covered | hit
                if s.after is not None:
                    cut = pl.select(pl.when(hit).then(pl.lit(s.after, dtype=_TIME)).otherwise(cut)).to_series()
        return pl.DataFrame({"_covered": covered, "_span_cut": cut})

    def cuts(self, frame: pl.DataFrame, cluster_id: str | None) -> tuple[pl.Series, int]:
        """The cut-off of each row of an archived frame (aligned; null = cannot be late), and how many rows a
        recorded cycle read."""
        if "_offset" in frame.columns and self.spans:
            spans = self._span_cuts(frame, cluster_id)
        else:
            spans = pl.DataFrame({"_covered": pl.repeat(False, frame.height, eager=True),
                                  "_span_cut": pl.repeat(None, frame.height, dtype=_TIME, eager=True)})
        if self.receipts.is_empty() or frame["received_time"].null_count() == frame.height:
            by_receipt = pl.repeat(None, frame.height, dtype=_TIME, eager=True)   # nothing received: no cut-off
        else:
            keyed = frame.select(pl.col("received_time").cast(_TIME), pl.int_range(pl.len()).alias("_i"))
            known = keyed.drop_nulls("received_time").sort("received_time")
            by_receipt = (keyed.join(known.join_asof(self.receipts, on="received_time", strategy="backward",
                                                     allow_exact_matches=False).select("_i", "cut"),
                                     on="_i", how="left", maintain_order="left")["cut"])
        covered = spans["_covered"]
        cut = pl.select(pl.when(covered).then(spans["_span_cut"]).otherwise(by_receipt)).to_series()
        return cut, int(covered.sum())


def split_late(frame: pl.DataFrame, cut: pl.Series) -> tuple[pl.DataFrame, int]:
    """(the rows that are not late, how many were) for per-row cut-offs `cut` (null: never late)."""
    late = (frame["event_time"] < cut).fill_null(False)
    n = int(late.sum())
    return (frame.filter(~late) if n else frame), n
