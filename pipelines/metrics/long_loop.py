"""Long-loop outcome rates per arm: of the background tasks whose outcome is known, the share accepted (accepted or
merged), from the task-outcome table (schemas/outcomes.py), with the A/B table's delta-method interval.

    result = acceptance(read_outcome_table(outcome_table(rewards)), alpha=0.05)
    result["diff"], result["ci_low"], result["ci_high"]          # treatment - control, absolute

The unit of a task is its first request (its arm, user and serving version); the statistical unit is the user,
as in the A/B table (a user's tasks are correlated): per user, Y = tasks accepted and N = tasks judged, and the
rate is sum(Y) / sum(N) (intervals.py). Tasks whose outcome never came (unknown) are excluded and counted.
"""

from __future__ import annotations

import math
from datetime import datetime

import polars as pl

from pipelines.metrics.intervals import Moments, ratio_change

ACCEPTED = ("accepted", "merged")
TASK = ["org_id", "workspace_id", "task_id"]   # a background task's identity


def _per_task(requests: pl.DataFrame, *columns: pl.Expr, **named: pl.Expr) -> pl.DataFrame:
    """One row per task of `requests`: its arm and `started` (of its first request), and `columns`, `named`."""
    return (requests.sort("request_time", "request_id").group_by(TASK, maintain_order=True)
            .agg(pl.col("arm").first(), *columns, started=pl.col("request_time").first(), **named))


def task_units(outcomes: pl.DataFrame) -> pl.DataFrame:
    """One row per background task seen in `outcomes` (outcome rows): org_id, workspace_id, task_id, arm,
    user_id, policy_version and started (of its first request), known, accepted, outcome."""
    return (_per_task(outcomes, pl.col("user_id").first(), pl.col("policy_version").first(),
                      known=(pl.col("outcome_label") == "known").any(),
                      outcome=pl.col("outcome").filter(pl.col("outcome_label") == "known").first())
            .with_columns(accepted=pl.col("outcome").is_in(ACCEPTED).fill_null(False)))


def started_tasks(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per background task in reward rows (those with a task_id): org_id, workspace_id, task_id, arm and
    started (of its first request). A task's requests have rows long before its outcome can come."""
    return _per_task(rows.filter(pl.col("task_id").is_not_null()))


def per_user(tasks: pl.DataFrame) -> pl.DataFrame:
    """The statistical units of judged tasks (`task_units` rows whose outcome is known): per user_id, Y = tasks
    accepted and N = tasks judged (floats)."""
    return tasks.group_by("user_id").agg(Y=pl.col("accepted").cast(pl.Float64).sum(), N=pl.len().cast(pl.Float64))


def _moments(tasks: pl.DataFrame) -> Moments | None:
    if tasks.is_empty():
        return None
    units = per_user(tasks)
    y, n = units["Y"], units["N"]
    return Moments(units.height, float(y.sum()), float(n.sum()), float((y * y).sum()), float((n * n).sum()),
                   float((y * n).sum()))


def acceptance(outcomes: pl.DataFrame, control: str = "control", treatment: str = "treatment",
               alpha: float = 0.05, since: datetime | None = None, rows: pl.DataFrame | None = None,
               srm_threshold: float = 0.001) -> dict:
    """{control, treatment, diff, ci_low, ci_high, tasks, tasks_unknown, users, since}: the acceptance rate of each
    arm's judged background tasks and treatment - control with its (1 - alpha) interval; None where an arm has
    none. `since`: only the tasks whose first request came then or later (the A/B table's window: from the first
    request treatment served with another checkpoint than control).

    `rows` (the reward rows): adds `tasks_started` and `judged_share` per arm, the share of the tasks started
    (in the window) whose outcome row is in. Outcomes come hours after a task's last step, so the share is below 1
    while a run goes on; when it differs between the arms (one arm's tasks take longer, e.g. slower serving on an
    accelerated clock), the judged tasks are not comparable samples and the change is biased:
    `judged_share_flagged` when the test of equal shares (`judged_share_p`) is below `srm_threshold`."""
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
            "since": since.isoformat() if since is not None else None} | (
        {} if rows is None else _judged_share(judged, rows, since, (control, treatment), srm_threshold))


def _judged_share(judged: pl.DataFrame, rows: pl.DataFrame, since: datetime | None, arms: tuple[str, str],
                  threshold: float) -> dict:
    started = started_tasks(rows)
    if since is not None:
        started = started.filter(pl.col("started") >= since)
    done = started.join(judged.select(TASK), on=TASK, how="semi")     # the tasks started whose outcome is in
    n = {arm: int((started["arm"] == arm).sum()) for arm in arms}
    k = {arm: int((done["arm"] == arm).sum()) for arm in arms}
    p = _equal_shares_p(k[arms[0]], n[arms[0]], k[arms[1]], n[arms[1]])
    return {"tasks_started": n, "judged_share": {arm: (k[arm] / n[arm] if n[arm] else None) for arm in arms},
            "judged_share_p": p, "judged_share_flagged": p is not None and p < threshold}


def _equal_shares_p(k1: int, n1: int, k2: int, n2: int) -> float | None:
    """Two-sided p-value of the pooled two-proportion z-test that k1/n1 and k2/n2 share one proportion."""
    if not n1 or not n2:
        return None
    pooled = (k1 + k2) / (n1 + n2)
    var = pooled * (1 - pooled) * (1 / n1 + 1 / n2)
    if var == 0:
        return 1.0
    return math.erfc(abs(k1 / n1 - k2 / n2) / math.sqrt(var) / math.sqrt(2))
