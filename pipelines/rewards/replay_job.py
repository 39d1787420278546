"""The replay job for data engineers: the archived event log over a time range -> a reward table.

    rtrl replay --events .rtrl/archive --start 2026-11-01T00:00Z --end 2026-11-02T00:00Z --out rewards/

Rows are those of requests made in [start, end), reward rows and the outcome rows of background tasks alike. To
see everything they need, the job reads (`read_spans`):
- every event up to end + the longest maturity delay + the follow-up window (`read_until`): every reward row of
  a request made before `end` is mature by then and has all its events;
- background tasks' events (trajectories with a task_id, task_outcomes) further, up to end + `long_horizon_s`
  (`tasks_until`): a request's outcome is the first of its task within the long horizon, and every request of
  the chain it decides comes before it;
- background tasks' events before `start`, back to start - `long_horizon_s` (`tasks_from`): the requests of a
  chain that began before the range, which its outcome rows count (`chain_requests`), and the outcomes that
  decide them.
It fires once, at `fire_at` (end + long_horizon_s + outcome_lateness_s, or `read_until` when that is later):
every outcome row of a request made before `end` has matured by then, so none is left pending. A replay's
output is complete and does not depend on when it runs. Same input, same spec -> byte-identical table.

Late data is what the live cycles found late (pipelines/rewards/lateness.py): given the rewards state of the
live cycles (`cycles`: the cycle job's state root with its `cycles/*.json` manifests), an event a recorded cycle
read is late exactly when that cycle found it late; any other event is judged by its archived `received_time`.
A replay over the live cycles' window therefore reproduces their rows, their outcome rows and their late counts:
an outcome row is decided by the same non-late events, and the live join keeps a task's events until every row
that can count them is out (`RewardSpec.outcome_keep_s`), so its chain holds what the replay's holds. The
counters count what the replay writes: the rows (and outcome rows) of requests made in [start, end).
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
from pipelines.rewards.read_archive import ReadArchive, ReadSpan, count_duplicate_copies, receipt_times
from pipelines.rewards.spec import RewardSpec
from schemas import storage


COUNTERS = ("events_read", "duplicates_dropped", "rows_emitted", "unknown_labels", "late_requests", "late_events",
            "late_rule_live_cycle", "late_rule_receipt", "outcome_rows", "outcome_unknown", "outcomes_pending",
            "late_outcomes")


@dataclass
class ReplaySummary:
    out: str
    window: str
    partitions: list[tuple[str, int]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    outcome_partitions: list[tuple[str, int]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.partitions)

    @property
    def outcome_rows(self) -> int:
        return sum(n for _, n in self.outcome_partitions)


def window_label(start: datetime, end: datetime) -> str:
    f = "%Y%m%dT%H%M%SZ"
    return f"replay-{start.strftime(f)}-{end.strftime(f)}"


def read_until(end: datetime, spec: RewardSpec) -> datetime:
    """Where reading every event type stops so that every request made before `end` has its reward row mature and
    all its events."""
    return end + timedelta(seconds=spec.maturity_delay_s(question=True) + spec.followup_window_s)


def tasks_from(start: datetime, spec: RewardSpec) -> datetime:
    """Where reading background tasks' events starts: a chain decided by the outcome of a request made at or after
    `start` holds no request older than start - long_horizon_s."""
    return start - timedelta(seconds=spec.long_horizon_s)


def tasks_until(end: datetime, spec: RewardSpec) -> datetime:
    """Where reading background tasks' events stops: the outcome of a request made before `end`, and every request
    of its chain, come before end + long_horizon_s."""
    return end + timedelta(seconds=spec.long_horizon_s)


def fire_at(end: datetime, spec: RewardSpec) -> datetime:
    """The replay's one firing: every row and outcome row of a request made before `end` is mature by then (an
    outcome row by its outcome, or the long horizon, + outcome_lateness_s; never before its reward row)."""
    return max(read_until(end, spec), end + timedelta(seconds=spec.long_horizon_s + spec.outcome_lateness_s))


def read_spans(start: datetime, end: datetime, spec: RewardSpec) -> list[ReadSpan]:
    """What a replay of [start, end) reads: background tasks' events from `tasks_from`, every event in
    [start, read_until), background tasks' events again up to `tasks_until`."""
    until = read_until(end, spec)
    spans = [ReadSpan(tasks_from(start, spec), start, tasks_only=True), ReadSpan(start, until)]
    if tasks_until(end, spec) > until:
        spans.append(ReadSpan(until, tasks_until(end, spec), tasks_only=True))
    return spans


def replay_cuts(archive: str | Path, start: datetime, end: datetime, spec: RewardSpec,
                cycles: str | Path | None) -> ReplayCuts:
    """The cut-off of every event the replay reads: the live cycles' (recorded under `cycles`), else its receipt's,
    from the receipts of every event over all the spans it reads."""
    spans = read_spans(start, end, spec)
    receipts = receipt_cuts(receipt_times(archive, spans[0].start, spans[-1].end), spec.allowed_lateness_s,
                            MAX_SKEW_S)
    return ReplayCuts(cycle_spans(cycles), receipts)


def build(p: beam.Pipeline, archive: str | Path, start: datetime, end: datetime, sink: Sink, spec: RewardSpec,
          shards: int | None = None, cuts: ReplayCuts | None = None):
    in_range = InRange(start, end)
    return (p
            | "ReadArchive" >> ReadArchive(archive, cuts=cuts, spans=read_spans(start, end, spec))
            | "Rewards" >> BoundedRewards(spec, shards or DEFAULT_SHARDS, fire_at(end, spec), sink, keep=in_range))


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
    for name, n in count_duplicate_copies(archive, None, None, cuts, read_spans(start, end, spec)).items():
        counters[name] = counters.get(name, 0) + n
        if name == "events_read":
            progress.add("events_read", n)
    return ReplaySummary(str(out), window, [tuple(x) for x in result["partitions"]], counters,
                         [tuple(x) for x in result.get("outcome_partitions", [])])
