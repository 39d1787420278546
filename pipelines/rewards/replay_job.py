"""The replay job for data engineers: the archived event log over a time range -> a reward table.

    rtrl replay --events .rtrl/archive --start 2026-11-01T00:00Z --end 2026-11-02T00:00Z --out rewards/

Rows are those of requests made in [start, end). To see everything they need, the job reads events up to
end + the longest maturity delay + the follow-up window; every such request is mature by then, so a replay's
output is complete and does not depend on when it runs. Same input, same spec -> byte-identical table.

Late data is what the live cycles found late (pipelines/rewards/lateness.py): given the rewards state of the
live cycles (`cycles`: the cycle job's state root with its `cycles/*.json` manifests), an event a recorded cycle
read is late exactly when that cycle found it late; any other event is judged by its archived `received_time`.
A replay over the live cycles' window therefore reproduces their rows and their late counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import apache_beam as beam
import polars as pl
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.rewards import progress
from pipelines.rewards.batches import DEFAULT_SHARDS
from pipelines.rewards.bounded import BoundedRewards, Sink, read_summary, run_to_end
from pipelines.rewards.kafka_range import MAX_SKEW_S
from pipelines.rewards.lateness import ReplayCuts, cycle_spans, receipt_cuts
from pipelines.rewards.read_archive import ReadArchive, count_duplicate_copies, receipt_times
from pipelines.rewards.spec import RewardSpec
from schemas import storage


COUNTERS = ("events_read", "duplicates_dropped", "rows_emitted", "unknown_labels", "late_requests", "late_events",
            "late_rule_live_cycle", "late_rule_receipt")


@dataclass
class ReplaySummary:
    out: str
    window: str
    partitions: list[tuple[str, int]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.partitions)


def window_label(start: datetime, end: datetime) -> str:
    f = "%Y%m%dT%H%M%SZ"
    return f"replay-{start.strftime(f)}-{end.strftime(f)}"


def read_until(end: datetime, spec: RewardSpec) -> datetime:
    """Where reading stops so that every request made before `end` is mature and has all its events."""
    return end + timedelta(seconds=spec.maturity_delay_s(question=True) + spec.followup_window_s)


def replay_cuts(archive: str | Path, start: datetime, end: datetime, spec: RewardSpec,
                cycles: str | Path | None) -> ReplayCuts:
    """The cut-off of every event the replay reads: the live cycles' (recorded under `cycles`), else its receipt's."""
    receipts = receipt_cuts(receipt_times(archive, start, read_until(end, spec)), spec.allowed_lateness_s,
                            MAX_SKEW_S)
    return ReplayCuts(cycle_spans(cycles), receipts)


def build(p: beam.Pipeline, archive: str | Path, start: datetime, end: datetime, sink: Sink, spec: RewardSpec,
          shards: int | None = None, cuts: ReplayCuts | None = None):
    in_range = InRange(start, end)
    return (p
            | "ReadArchive" >> ReadArchive(archive, start, read_until(end, spec), cuts)
            | "Rewards" >> BoundedRewards(spec, shards or DEFAULT_SHARDS, read_until(end, spec), sink, keep=in_range))


@dataclass(frozen=True)
class InRange:
    """Rows of requests made in [start, end)."""
    start: datetime
    end: datetime

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        return rows.filter((pl.col("request_time") >= self.start) & (pl.col("request_time") < self.end))


def run(archive: str | Path, start: datetime, end: datetime, out: str | Path, spec: RewardSpec,
        shards: int | None = None, beam_args: list[str] | None = None,
        cycles: str | Path | None = None) -> ReplaySummary:
    """`cycles`: the live cycles' rewards state root, whose recorded cut-offs decide lateness (see above)."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must carry a timezone (event times are UTC)")
    if end <= start:
        raise ValueError(f"end ({end.isoformat()}) must be after start ({start.isoformat()})")
    options = PipelineOptions(beam_args or ["--runner=DirectRunner"])
    window = window_label(start, end)
    sink = Sink(table=str(out), window=window, result=str(storage.join(out, "_replays", f"{window}.json")))
    p = beam.Pipeline(options=options)
    cuts = replay_cuts(archive, start, end, spec, cycles)
    build(p, archive, start, end, sink, spec, shards, cuts)
    run_to_end(p)
    result = read_summary(sink)
    counters = dict.fromkeys(COUNTERS, 0) | result["counters"]
    for name, n in count_duplicate_copies(archive, start, read_until(end, spec), cuts).items():
        counters[name] = counters.get(name, 0) + n
        if name == "events_read":
            progress.add("events_read", n)
    return ReplaySummary(str(out), window, [tuple(x) for x in result["partitions"]], counters)
