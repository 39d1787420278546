"""Offline A/B on the simulated population: checkpoints compared on the A/B table's metrics, without processes.

Each checkpoint serves the same seeded users in this process (`offline_cycle.LocalPolicy`, sampled like serving,
on the deterministic clock); the reward job's computation turns their reactions into rows, and the rows are
summarized with the A/B table's own per-user ratio metrics (`pipelines.metrics`). Every checkpoint meets the same
users with the same first task, and most later tasks are shared too (they differ once the answers do: 106 of ~145
first-turn prompts per checkpoint were shared between v0 and a trained checkpoint, 32 users, 1 hour), so the
comparison is far less noisy than a live A/B of the same size. The rows are split the ways the live A/B hides:

    first_turn / retry   the first policy turn of a task, or a later one (after a complaint or a clarification)
    task kind            the simulator's task kinds (it knows the task; the reward table does not)

This is what tells whether a trainer change moves the metrics the demo's A/B measures (edit persistence,
dissatisfied follow-ups) rather than only the held-out edit accuracy: a checkpoint can make more right edits on
fresh tasks and still not lower the dissatisfied rate of live traffic (README, "The cycle").
"""

from __future__ import annotations

from typing import Callable, Sequence

import polars as pl

from pipelines.metrics.intervals import z_value
from pipelines.metrics.rates import INPUT_COLUMNS, den_col, num_col, rates, unit_stats

METRICS = ("edit_persistence_rate", "dissatisfied_followup_rate", "broken_tool_call_rate", "clarification_rate",
           "shown_edit_persistence_rate", "reward_mean")
COMPARED = ("edit_persistence_rate", "dissatisfied_followup_rate", "shown_edit_persistence_rate")   # vs the first


def serve_population(folder: str, sim, spec, hours: float, seed: int, label: str = "1") -> pl.DataFrame:
    """Reward rows (by the reward spec `spec`) of `folder` serving the population `sim` (a SimulatorConfig) for
    `hours` simulated hours, with the columns `turn` (1 = the task's first policy turn), `task_kind` and `ambiguous`
    added; `label` is the rows' policy_version."""
    from infra.offline_cycle import reward_rows, serve

    served = serve(folder, label, sim, hours, seed, annotate=True)
    rows = reward_rows(served.events, spec)
    notes = pl.DataFrame([{"request_id": k, **v} for k, v in served.annotations.items()],
                         schema={"request_id": pl.Utf8, "turn": pl.Int64, "task_kind": pl.Utf8,
                                 "ambiguous": pl.Boolean})
    return rows.join(notes, on="request_id", how="left")


def unit_sums(rows: pl.DataFrame) -> pl.DataFrame:
    """One checkpoint's per-user sums of every metric (pipelines.metrics.rates.unit_stats)."""
    return unit_stats(rows.lazy().select(INPUT_COLUMNS)).collect()


def _rates(rows: pl.DataFrame) -> dict:
    if rows.is_empty():
        return {"rows": 0}
    r = rates(unit_sums(rows), ["arm"]).row(0, named=True)
    return {"rows": int(r["n"]), "users": int(r["users"]),
            **{m: (round(r[m], 4) if r[m] is not None else None) for m in METRICS}}


def summarize(rows: pl.DataFrame) -> dict:
    """The metrics over all rows, first turns, retries and per task kind (rows of one checkpoint)."""
    first = pl.col("turn") == 1
    return {"all": _rates(rows), "first_turn": _rates(rows.filter(first)), "retry": _rates(rows.filter(~first)),
            "by_task_kind": {k: _rates(rows.filter(pl.col("task_kind") == k))
                             for k in sorted(rows["task_kind"].drop_nulls().unique().to_list())}}


def paired_difference(base: pl.DataFrame, other: pl.DataFrame, metric: str, alpha: float = 0.05) -> dict:
    """`other` - `base` (reward rows of two checkpoints) on the ratio metric `metric`, with a (1 - alpha)
    delta-method interval that pairs each user's rows under the two checkpoints (see `_paired`)."""
    return paired_units_difference(unit_sums(base), unit_sums(other), metric, alpha)


def paired_units_difference(base: pl.DataFrame, other: pl.DataFrame, metric: str, alpha: float) -> dict:
    """`other` - `base` on `metric` from two checkpoints' unit stats (`unit_sums`), with a (1 - alpha) interval
    (`paired_columns_difference` over the metric's numerator and denominator sums)."""
    return paired_columns_difference(base, other, num_col(metric), den_col(metric), alpha)


def paired_columns_difference(base: pl.DataFrame, other: pl.DataFrame, num: str, den: str, alpha: float) -> dict:
    """`other` - `base` on the ratio sum(`num`) / sum(`den`) of two checkpoints' per-user frames (a `user_id`
    column; a user may have several rows), with a (1 - alpha) interval.
    The same seeded users serve both, so their own ease or difficulty cancels: with r = sum(y) / sum(n) per
    checkpoint, user u contributes d_u = (y_o - r_o n_o) / nbar_o - (y_b - r_b n_b) / nbar_b, and Var(r_o - r_b) = s^2(d) / U over the U users
    seen by either (a user missing from one side has sums 0 there)."""
    import numpy as np

    def per_user(units: pl.DataFrame) -> pl.DataFrame:
        return units.group_by("user_id").agg(y=pl.col(num).sum(), n=pl.col(den).sum())

    both = per_user(base).join(per_user(other), on="user_id", how="full", suffix="_o", coalesce=True).fill_null(0.0)
    yb, nb, yo, no = (both[c].to_numpy().astype(float) for c in ("y", "n", "y_o", "n_o"))
    users = len(both)
    if users < 2 or nb.sum() <= 0 or no.sum() <= 0:
        return {"diff": None, "ci_low": None, "ci_high": None, "se": None, "paired_users": users}
    rb, ro = yb.sum() / nb.sum(), yo.sum() / no.sum()
    d = (yo - ro * no) / no.mean() - (yb - rb * nb) / nb.mean()
    se = float(np.sqrt(d.var(ddof=1) / users))
    half = z_value(alpha) * se
    est = float(ro - rb)
    return {"diff": est, "ci_low": est - half, "ci_high": est + half, "se": se, "paired_users": users}


def differences(base: pl.DataFrame, other: pl.DataFrame, alpha: float = 0.05) -> dict:
    """`other` - `base` on the compared metrics over all rows, each with its paired (1 - alpha) interval."""
    ub, uo = unit_sums(base), unit_sums(other)
    return {m: paired_units_difference(ub, uo, m, alpha) for m in COMPARED}


def _served(folder: str, sim, spec, hours: float, seed: int, label: str, threads: int | None) -> tuple:
    """(reward rows, seconds) of one checkpoint, on `threads` torch threads (None: as they are)."""
    import time

    if threads:
        import torch

        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    return serve_population(folder, sim, spec, hours, seed, label), time.perf_counter() - t0


def compare(folders: Sequence[str], sim, spec, hours: float, seed: int,
            progress: Callable[[str], None] = lambda s: None, jobs: int = 1, threads: int | None = None) -> dict:
    """Each checkpoint on the same population (rows by the reward spec `spec`); differences are against the first.
    With `jobs` > 1 that many checkpoints are served at once, each in a process of its own on `threads` torch
    threads (default 1: one sequence's decoding is bound by per-operation overhead, not arithmetic); a checkpoint's
    rows depend on its thread count only through floating-point rounding, so compare runs made with the same."""
    import multiprocessing

    calls = [(folder, sim, spec, hours, seed, str(index + 1), threads or (1 if jobs > 1 else None))
             for index, folder in enumerate(folders)]
    if jobs > 1 and len(folders) > 1:
        with multiprocessing.get_context("spawn").Pool(min(jobs, len(folders))) as pool:
            pending = [pool.apply_async(_served, call) for call in calls]
            served = [p.get() for p in pending]
    else:
        served = [_served(*call) for call in calls]
    results, first_rows = [], None
    for folder, (rows, seconds) in zip(folders, served):
        entry = {"checkpoint": str(folder), "seconds": round(seconds, 1), **summarize(rows)}
        if first_rows is None:
            first_rows = rows
        else:
            entry["vs_first"] = differences(first_rows, rows)
        results.append(entry)
        a = entry["all"]
        progress(f"{folder}: {a['rows']} rows, dissatisfied {a.get('dissatisfied_followup_rate')}, edit persistence "
                 f"{a.get('edit_persistence_rate')} ({entry['seconds']}s)")
    return {"users": sim.users, "hours": hours, "population_seed": sim.seed, "sampling_seed": seed,
            "checkpoints": results}
