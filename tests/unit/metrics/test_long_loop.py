"""Long-loop acceptance per arm (pipelines/metrics/long_loop.py): one unit per task (its first request's arm),
users as the statistical unit, unknown outcomes excluded and counted; hand-derived values."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from pipelines.metrics.long_loop import acceptance, task_units

T = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _rows(tasks):
    """tasks: (task_id, user, arm, outcome or '' for unknown, requests)."""
    out = []
    for task, user, arm, outcome, n in tasks:
        for i in range(n):
            out.append({"request_id": f"{task}-{i}", "task_id": task, "org_id": "o", "workspace_id": f"w-{user}",
                        "user_id": user, "arm": arm, "policy_version": "1", "request_time": T + timedelta(minutes=i),
                        "outcome_label": "known" if outcome else "unknown", "outcome": outcome})
    return pl.DataFrame(out)


def test_one_unit_per_task_counted_once_whatever_its_chain_length():
    units = task_units(_rows([("a", "u1", "control", "merged", 3), ("b", "u1", "control", "reverted", 1),
                              ("c", "u2", "treatment", "", 2)]))
    got = {r["task_id"]: (r["known"], r["accepted"]) for r in units.to_dicts()}
    assert got == {"a": (True, True), "b": (True, False), "c": (False, False)}


def test_acceptance_per_arm_with_users_as_the_unit():
    # control: u1 1/2 accepted, u2 0/1; treatment: u3 2/2, u4 1/2; one unknown task in treatment
    rows = _rows([("a", "u1", "control", "accepted", 2), ("b", "u1", "control", "abandoned", 1),
                  ("c", "u2", "control", "reverted", 3),
                  ("d", "u3", "treatment", "merged", 1), ("e", "u3", "treatment", "accepted", 2),
                  ("f", "u4", "treatment", "accepted", 1), ("g", "u4", "treatment", "reverted", 1),
                  ("h", "u4", "treatment", "", 2)])
    r = acceptance(rows)
    assert r["control"] == pytest.approx(1 / 3) and r["treatment"] == pytest.approx(3 / 4)
    assert r["diff"] == pytest.approx(3 / 4 - 1 / 3)
    assert r["tasks"] == {"control": 3, "treatment": 4} and r["tasks_unknown"] == 1
    assert r["users"] == {"control": 2, "treatment": 2}

    def var(ys, ns):   # the delta method by hand (intervals.py)
        n, ybar, nbar = len(ys), sum(ys) / len(ys), sum(ns) / len(ns)
        ratio = sum(ys) / sum(ns)
        s_yy = sum((y - ybar) ** 2 for y in ys) / (n - 1)
        s_nn = sum((x - nbar) ** 2 for x in ns) / (n - 1)
        s_yn = sum((y - ybar) * (x - nbar) for y, x in zip(ys, ns)) / (n - 1)
        return (s_yy - 2 * ratio * s_yn + ratio ** 2 * s_nn) / (n * nbar ** 2)

    se = math.sqrt(var([1, 0], [2, 1]) + var([2, 1], [2, 2]))
    assert r["ci_low"] == pytest.approx(r["diff"] - 1.959964 * se, abs=1e-5)
    assert r["ci_high"] == pytest.approx(r["diff"] + 1.959964 * se, abs=1e-5)


def test_an_arm_without_judged_tasks_has_no_rate():
    r = acceptance(_rows([("a", "u1", "control", "accepted", 1), ("b", "u2", "treatment", "", 1)]))
    assert r["control"] == 1.0 and r["treatment"] is None and r["diff"] is None and r["ci_low"] is None


def test_since_keeps_the_tasks_whose_first_request_came_then_or_later():
    # "a" starts at T (its later requests after `since`); "b" and "c" start at T + 1 h
    early = _rows([("a", "u1", "control", "accepted", 3)])
    late = _rows([("b", "u2", "control", "reverted", 1), ("c", "u3", "treatment", "merged", 1)]).with_columns(
        request_time=pl.col("request_time") + timedelta(hours=1))
    rows = pl.concat([early, late])
    since = T + timedelta(minutes=1)
    r = acceptance(rows, since=since)
    assert r["tasks"] == {"control": 1, "treatment": 1} and r["control"] == 0.0 and r["treatment"] == 1.0
    assert r["since"] == since.isoformat()
    assert acceptance(rows)["tasks"] == {"control": 2, "treatment": 1} and acceptance(rows)["since"] is None


def test_the_judged_share_per_arm_counts_the_tasks_started_and_flags_a_censored_arm():
    # reward rows: control started 4 tasks, treatment 4; outcome rows: control judged 1, treatment 4
    started = [(t, "control") for t in "abcd"] + [(t, "treatment") for t in "efgh"]
    rows = pl.DataFrame([{"request_id": f"{t}-0", "task_id": t, "org_id": "o", "workspace_id": "w", "arm": arm,
                          "request_time": T} for t, arm in started]
                        + [{"request_id": "x", "task_id": None, "org_id": "o", "workspace_id": "w",
                            "arm": "control", "request_time": T}])   # not a background request
    outcomes = _rows([("a", "u1", "control", "accepted", 1), ("e", "u2", "treatment", "merged", 1),
                      ("f", "u3", "treatment", "reverted", 1), ("g", "u4", "treatment", "accepted", 1),
                      ("h", "u5", "treatment", "abandoned", 1)]).with_columns(workspace_id=pl.lit("w"))
    r = acceptance(outcomes, rows=rows)
    assert r["tasks_started"] == {"control": 4, "treatment": 4}
    assert r["judged_share"] == {"control": 0.25, "treatment": 1.0}
    pooled = 5 / 8   # by hand: z = 0.75 / sqrt(pooled (1 - pooled) (1/4 + 1/4))
    z = 0.75 / math.sqrt(pooled * (1 - pooled) * 0.5)
    assert r["judged_share_p"] == pytest.approx(math.erfc(z / math.sqrt(2)))
    assert r["judged_share_flagged"] is False                               # p 0.03: above the SRM threshold
    assert acceptance(outcomes, rows=rows, srm_threshold=0.05)["judged_share_flagged"] is True
    assert "judged_share" not in acceptance(outcomes)


def test_the_table_warns_when_the_arms_were_judged_in_different_shares():
    from infra.orchestrator.specialize_summary import render_specialization

    loop = {"control": 0.2, "treatment": 0.3, "diff": 0.1, "ci_low": 0.0, "ci_high": 0.2,
            "tasks": {"control": 20, "treatment": 100}, "tasks_unknown": 0,
            "tasks_started": {"control": 200, "treatment": 210},
            "judged_share": {"control": 0.1, "treatment": 0.48}, "judged_share_p": 1e-12,
            "judged_share_flagged": True}
    lines = render_specialization({"long_loop": loop})
    assert "  judged of the tasks started: control 20/200, treatment 100/210" in lines
    assert any(line.startswith("  WARNING: the arms' tasks were judged in different shares") for line in lines)
    even = render_specialization({"long_loop": loop | {"judged_share_p": 0.4, "judged_share_flagged": False}})
    assert not any("WARNING" in line for line in even)
