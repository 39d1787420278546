"""The two forms of the reward join give the same rows and counts on the same input: the bounded GroupByKey form
(`BoundedRewards`, what cycle and replay runs use on any runner) and the stateful, timer-driven form
(`ComputeRewards`: Beam state, run here bounded with the same cut-offs, and in streaming from a TestStream),
over consecutive cycles chained by their carry, with out-of-order, duplicate and late events."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import apache_beam as beam
import polars as pl
import pytest

from pipelines.rewards.bounded import BoundedRewards, Sink, read_summary
from pipelines.rewards.compute import run_and_count
from pipelines.rewards.cycle_job import ReadCarryFn
from pipelines.rewards.lateness import DropLateFn
from pipelines.rewards.parse import DEAD_LETTER, ParseEventsFn
from pipelines.rewards.spec import RewardSpec
from schemas import to_wire
from schemas.reward_table import outcome_table, read_outcome_table, read_reward_table
from tests.unit.rewards.builders import T0, applied, at, followup, rejected, snapshot, tool_result, trajectory
from tests.unit.rewards.test_compute_stream import run_stream
from tests.unit.rewards.test_cycle_carry import run_bounded

pytestmark = pytest.mark.slow
SPEC = RewardSpec()
DELAY, Q_DELAY = SPEC.maturity_delay_s(), SPEC.maturity_delay_s(question=True)
COUNTED = ("late_requests", "late_events", "duplicates_dropped", "rows_emitted", "requests_pending")


def traffic(first: int, last: int) -> list:
    """Requests 600 s apart over four sessions: edits kept or rejected, questions, broken tool calls, follow-ups."""
    ev = []
    for i in range(first, last):
        t, s = 600 * i, dict(user_id=f"u{i % 4}", session_id=f"s{i % 4}", workspace_id=f"ws{i % 4}")
        ev += [trajectory(f"r{i}", t, kind="question" if i % 5 == 4 else "edit",
                          calls=("ok", "parse_error")[: 1 + (i % 3 == 0)], **s),
               followup(f"r{i}", t + 40, "that is wrong" if i % 2 else "thanks", **s)]
        ev += ([applied(f"r{i}", t + 20, "abcd", **s), snapshot(t + 900, "abc", **s)] if i % 3 else
               [rejected(f"r{i}", t + 15, **s), tool_result(f"r{i}", t + 16, "tool_error", **s)])
    return ev


def cycles() -> list[tuple[list, float]]:
    """Three cycles' input (shuffled: out of order) and each one's as_of (newest event time - allowed lateness)."""
    a, b, c = traffic(0, 10), traffic(10, 20), traffic(20, 26)
    as_of = [max(e.event_time for e in part) - timedelta(seconds=SPEC.allowed_lateness_s) for part in (a, b, c)]
    cut = as_of[0]
    retries = [e for e in a if e.event_time >= cut][:2] + a[:3]          # after cycle 1's cut-off: duplicates
    late = [followup("r2", 600 * 2 + 50, "that is wrong", user_id="u2", session_id="s2", workspace_id="ws2"),
            trajectory("r-late", 30, user_id="u1", session_id="s1", workspace_id="ws1")]
    b = b + retries + late + b[:2]                                        # b[:2]: duplicates within a cycle
    for part in (a, b, c):
        random.Random(len(part)).shuffle(part)
    return [(a, (as_of[0] - T0).total_seconds()), (b, (as_of[1] - T0).total_seconds()),
            (c, (as_of[2] - T0).total_seconds())]


def run_gbk(events, carry_in: Path | None, carry_out: Path, after_s: float | None, as_of_s: float, out: Path,
            outcomes: dict | None = None, spec: RewardSpec = SPEC):
    """One cycle with the bounded form; (rows by request id, counters). `outcomes`: a dict to fill with the
    cycle's outcome rows (from the task-outcome table) by request id."""
    window = carry_out.name
    sink = Sink(table=str(out), window=window, result=str(out / f"{window}.json"), carry=str(carry_out))
    after = at(after_s) if after_s is not None else None
    p = beam.Pipeline()
    new = (p | "Events" >> beam.Create([to_wire(e) for e in events])
           | beam.ParDo(ParseEventsFn()).with_outputs(DEAD_LETTER, main="events")).events
    if after is not None:
        new = new | "DropLate" >> beam.ParDo(DropLateFn(after))
    batches = new | "Batch" >> beam.combiners.ToList() | beam.FlatMap(_batches)
    files = sorted(str(f) for f in carry_in.glob("*.parquet")) if carry_in else []
    carried = p | "CarryFiles" >> beam.Create(files) | "ReadCarry" >> beam.ParDo(ReadCarryFn())
    _ = (batches, carried) | beam.Flatten() | BoundedRewards(spec, 2, at(as_of_s), sink, after=after)
    late = run_and_count(p)      # the harness drops late input with DropLateFn, counted as Beam metrics
    summary = read_summary(sink)
    rows = read_reward_table(out, window=window) if summary["partitions"] else pl.DataFrame()
    if outcomes is not None:
        outcomes.update({r["request_id"]: r for r in read_outcome_table(outcome_table(out), window=window).to_dicts()})
    counts = summary["counters"] | {k: v for k, v in late.items() if k.startswith("late_")}
    return {r["request_id"]: r for r in rows.to_dicts()}, counts


def _batches(events):
    from pipelines.rewards.batches import EventBatch
    from schemas import to_arrow

    by_type: dict[str, list] = {}
    for e in events:
        by_type.setdefault(e.event_type, []).append(e)
    return [EventBatch(t, pl.from_arrow(to_arrow(v, t))) for t, v in sorted(by_type.items())]


def test_the_bounded_form_gives_the_stateful_forms_rows_and_counts_over_chained_cycles(tmp_path):
    after = None
    for n, (events, as_of) in enumerate(cycles(), 1):
        prev = (tmp_path / f"s{n - 1}", tmp_path / f"g{n - 1}") if n > 1 else (None, None)
        state_rows, state_counts = run_bounded(events, prev[0], tmp_path / f"s{n}", after, as_of)
        gbk_rows, gbk_counts = run_gbk(events, prev[1], tmp_path / f"g{n}", after, as_of, tmp_path / "table")
        assert gbk_rows == state_rows, f"cycle {n}"
        for name in COUNTED:
            assert gbk_counts.get(name, 0) == state_counts.get(name, 0), (n, name, gbk_counts, state_counts)
        if n == 2:  # the scenario holds what it says
            assert state_counts["late_requests"] >= 1 and state_counts["late_events"] >= 1
            assert state_counts["duplicates_dropped"] >= 2
        carried = lambda d: {f.name: pl.read_parquet(f).sort("event_id") for f in d.glob("*.parquet")}  # noqa
        assert carried(tmp_path / f"g{n}").keys() == carried(tmp_path / f"s{n}").keys()
        for name, frame in carried(tmp_path / f"g{n}").items():
            assert frame.drop("received_time").equals(carried(tmp_path / f"s{n}")[name].drop("received_time"))
        after = as_of


def test_the_streaming_form_with_state_and_timers_gives_the_bounded_forms_rows(tmp_path):
    """The stream sees each cycle's input in arrival order, its watermark at the cycle's as_of after each; events
    the bounded cycles drop as late are far behind its firings too."""
    parts = cycles()
    steps = []
    for events, as_of in parts:
        steps += [("events", [(e, (e.event_time - T0).total_seconds()) for e in events]), ("watermark", as_of)]
    streamed, _ = run_stream(steps)
    bounded: dict[str, dict] = {}
    after = None
    for n, (events, as_of) in enumerate(parts, 1):
        rows, _ = run_gbk(events, tmp_path / f"g{n - 1}" if n > 1 else None, tmp_path / f"g{n}", after, as_of,
                          tmp_path / "table")
        bounded |= rows
        after = as_of
    assert bounded and set(bounded) <= set(streamed)
    assert {k: streamed[k] for k in bounded} == bounded
