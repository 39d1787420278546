"""Long-loop outcome rates per arm: of the background tasks whose outcome is known, the share accepted (accepted or
merged), from the task-outcome table (schemas/outcomes.py), with the A/B table's delta-method interval.

    result = acceptance(read_outcome_table(outcome_table(rewards)), alpha=0.05)
    result["diff"], result["ci_low"], result["ci_high"]          # treatment - control, absolute

The unit of a task is its first request (its arm, user and serving version); the statistical unit is the user,
as in the A/B table (a user's tasks are correlated): per user, Y = tasks accepted and N = tasks judged, and the
rate is sum(Y) / sum(N) (intervals.py). Tasks whose outcome never came (unknown) are excluded and counted.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from pipelines.metrics.intervals import Moments, ratio_change

ACCEPTED = ("accepted", "merged")


def task_units(outcomes: pl.DataFrame) -> pl.DataFrame:
    """One row per background task seen in `outcomes` (outcome rows): org_id, workspace_id, task_id, arm,
    user_id, policy_version and started (of its first request), known, accepted, outcome."""
    key = ["org_id", "workspace_id", "task_id"]
    return (outcomes.sort("request_time", "request_id").group_by(key, maintain_order=True)
            .agg(pl.col("arm").first(), pl.col("user_id").first(), pl.col("policy_version").first(),
                 started=pl.col("request_time").first(),
                 known=(pl.col("outcome_label") == "known").any(),
                 outcome=pl.col("outcome").filter(pl.col("outcome_label") == "known").first())
            .with_columns(accepted=pl.col("outcome").is_in(ACCEPTED).fill_null(False)))


def _moments(tasks: pl.DataFrame) -> Moments | None:
    if tasks.is_empty():
        return None
    per_user = tasks.group_by("user_id").agg(Y=pl.col("accepted").cast(pl.Float64).sum(),
                                             N=pl.len().cast(pl.Float64))
    y, n = per_user["Y"], per_user["N"]
    return Moments(per_user.height, float(y.sum()), float(n.sum()), float((y * y).sum()), float((n * n).sum()),
                   float((y * n).sum()))


def acceptance(outcomes: pl.DataFrame, control: str = "control", treatment: str = "treatment",
               alpha: float = 0.05, since: datetime | None = None) -> dict:
    """{control, treatment, diff, ci_low, ci_high, tasks, tasks_unknown, users, since}: the acceptance rate of each
    arm's judged background tasks and treatment - control with its (1 - alpha) interval; None where an arm has
    none. `since`: only the tasks whose first request came then or later (the A/B table's window: from the first
    request treatment served with another checkpoint than control)."""
    tasks = task_units(outcomes)
    if since is not None:
        tasks = tasks.filter(pl.col("started") >= since)
    judged = tasks.filter(pl.col("known"))
    m = {arm: _moments(judged.filter(pl.col("arm") == arm)) for arm in (control, treatment)}
    change = ratio_change(m[control], m[treatment], alpha)
    diff, _, low, high, _ = change.on("absolute")
    return {"control": change.control, "treatment": change.treatment, "diff": diff, "ci_low": low, "ci_high": high,
            "tasks": {arm: int((judged["arm"] == arm).sum()) for arm in (control, treatment)},
            "tasks_unknown": int(tasks.height - judged.height),
            "users": {arm: (m[arm].n if m[arm] else 0) for arm in (control, treatment)},
            "since": since.isoformat() if since is not None else None}
