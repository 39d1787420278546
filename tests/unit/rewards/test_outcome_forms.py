"""The long-loop join across chained cycles, in every form of the reward job: the bounded GroupByKey form (cycle
and replay runs), the stateful form run bounded, and the stateful form streaming from a TestStream give the same
outcome rows; a task's requests stay in the carried join state until their outcome matures (longer than any
per-edit row needs them); an outcome older than the previous cycle's cut-off is late, dropped and counted; a
resent copy of an outcome changes nothing."""

from __future__ import annotations

import pytest

from pipelines.rewards.spec import RewardSpec
from tests.unit.rewards.builders import T0, applied, snapshot, task_outcome, trajectory
from tests.unit.rewards.test_bounded_form import run_gbk
from tests.unit.rewards.test_compute_stream import run_stream
from tests.unit.rewards.test_cycle_carry import run_bounded

pytestmark = pytest.mark.slow
# a short long horizon, so that outcome rows mature within the three cycles; per-edit rows as by default
SPEC = RewardSpec(long_horizon_s=7200, outcome_lateness_s=300)


def cycles() -> list[tuple[list, float]]:
    """Three cycles' input and as_of (seconds after T0):
    task A: requests at 0 (session s1) and 1200 (session s2), merged at 5000 (cycle 2) -> known in cycle 2;
    task B: one request at 600, no outcome -> unknown at 600 + 7200 + 300 = 8100 (cycle 3), which needs its
            request carried through cycle 2's state (8000 - 600 > the per-edit rows' keep);
    task C: a request at 300; its outcome (at 2000) reaches only cycle 2, after cycle 1's cut-off at 3000: late,
            so C is unknown at 7800 (cycle 2);
    A's outcome is resent in cycle 3: a late copy, dropped."""
    merged_a = task_outcome("A", 5000, "merged", rating=4, workspace_id="wa")
    one = [trajectory("a1", 0, task_id="A", session_id="s1", workspace_id="wa"),
           trajectory("a2", 1200, task_id="A", session_id="s2", workspace_id="wa"),
           trajectory("b1", 600, task_id="B", workspace_id="wb"),
           trajectory("c1", 300, task_id="C", workspace_id="wc"),
           trajectory("r0", 100, workspace_id="wa"), applied("r0", 120, "ab", workspace_id="wa"),
           snapshot(900, "ab", workspace_id="wa")]
    two = [merged_a, task_outcome("C", 2000, "accepted", workspace_id="wc"), trajectory("r1", 4000, workspace_id="wb")]
    three = [merged_a.model_copy(), trajectory("r2", 9000, workspace_id="wc")]
    return [(one, 3000), (two, 8000), (three, 12000)]


EXPECTED = {"a1": ("known", "merged", 2, 2), "a2": ("known", "merged", 2, 2), "c1": ("unknown", "", 0, 2),
            "b1": ("unknown", "", 0, 3)}   # label, outcome, chain requests (0: unknown), cycle emitted


def _key(row: dict) -> tuple:
    return row["outcome_label"], row["outcome"], row["chain_requests"] if row["outcome_label"] == "known" else 0


def test_every_form_emits_the_same_outcome_rows_cycle_by_cycle_with_late_outcomes_dropped(tmp_path):
    after = None
    state_all: dict[str, dict] = {}
    parts = cycles()
    for n, (events, as_of) in enumerate(parts, 1):
        prev = (tmp_path / f"s{n - 1}", tmp_path / f"g{n - 1}") if n > 1 else (None, None)
        state, gbk = {}, {}
        _, state_counts = run_bounded(events, prev[0], tmp_path / f"s{n}", after, as_of, outcomes=state, spec=SPEC)
        _, gbk_counts = run_gbk(events, prev[1], tmp_path / f"g{n}", after, as_of, tmp_path / "table", outcomes=gbk,
                                spec=SPEC)
        assert state == gbk, f"cycle {n}"
        assert {r: _key(row) for r, row in gbk.items()} == \
            {r: e[:3] for r, e in EXPECTED.items() if e[3] == n}, f"cycle {n}"
        for name in ("late_events", "outcome_rows", "outcome_unknown"):
            assert gbk_counts.get(name, 0) == state_counts.get(name, 0), (n, name, gbk_counts, state_counts)
        if n > 1:
            assert gbk_counts["late_events"] == 1     # C's outcome in cycle 2, A's copy in cycle 3
        if n == 2:
            assert gbk_counts["outcomes_pending"] == 1   # b1, carried into cycle 3
        state_all |= state
        after = as_of
    a1 = state_all["a1"]
    assert a1["r_outcome"] == pytest.approx(1.125) and a1["mature_time"] == T0.replace(hour=13, minute=28, second=20)

    steps = []
    for events, as_of in parts:
        steps += [("events", [(e, (e.event_time - T0).total_seconds()) for e in events]), ("watermark", as_of)]
    _, _, streamed = run_stream(steps, spec=SPEC, with_outcomes=True)
    assert {r: streamed[r] for r in state_all} == state_all
