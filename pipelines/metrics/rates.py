"""Ratio metrics over reward rows, reduced to per-user sums: the only pass over the rows.

Every rate in the A/B table is a ratio of sums over rows, `sum(numerator) / sum(denominator)` (see `catalog.py`).
Users are what the router randomizes (sticky by user hash), so users, not requests, are the unit of analysis: a
user's requests are correlated, and treating them as independent would make every interval too narrow. One
group-by turns the rows into *unit stats*: per (arm, policy_version, org_id, user_id), the row count `n`, each
metric's numerator sum `<metric>_num` and, where it is not `n`, its denominator sum `<metric>_den`. Everything
else (rates, intervals, the per-checkpoint and per-org breakdowns, the cumulative history) is computed from these
few thousand unit rows, never from the rows again; they are also what the store keeps per cycle.

`DEFINITIONS` numbers the per-row terms below; a cycle's stored result records it, and a cycle is not accumulated
with earlier cycles measured under other definitions (`cycle.py`). Version 2 (2026-11-26) closed the two escapes
Cursor reported as reward hacks (docs/ab-dashboard.md) in the A/B's own metrics:
  * edit persistence counts every edit attempt whose outcome is known: a response whose tool call broke changed
    nothing and persists 0, as a rejected edit does. Version 1 counted shown edits only (`shown_edit_persistence_
    rate` now), so a checkpoint that turned broken calls into real edits on hard tasks read lower: a one-cycle
    candidate against v0 on the same simulated users applied a `change_constant` edit on 21.4 % of those requests
    instead of 14.0 %, each persisting more often, and read −1.0 pp per shown edit against +2.3 pp per attempt
    (README, "What the A/B's edit persistence counts").
  * a dissatisfied follow-up includes "why are you asking? just do it" (`question_unnecessary`): a needless
    question is a dissatisfied turn, and version 1 let a checkpoint that asks instead of editing lower the rate.
"""

from __future__ import annotations

import polars as pl

from pipelines.metrics.catalog import RATIO_METRICS

DEFINITIONS = 2
KEYS = ("arm", "policy_version", "org_id", "user_id")
# Columns of the reward table (schemas/rewards.py) the metrics read; nothing else is loaded.
INPUT_COLUMNS = ("arm", "policy_version", "org_id", "user_id", "mature_time", "response_kind", "completion_tokens",
                 "latency_ms", "broken_tool_calls", "persistence", "persistence_label", "followup_status",
                 "question_unnecessary", "reward")


def _terms() -> dict[str, tuple[pl.Expr, pl.Expr | None]]:
    """metric -> (per-row numerator, per-row denominator or None for 1)."""
    known = pl.col("persistence_label") == "known"
    persisted = pl.when(known).then(pl.col("persistence").fill_null(0.0)).otherwise(0.0)
    # an edit attempt with a known outcome: a shown edit (applied and judged, or rejected), or a broken tool call
    # (nothing applied, so nothing persists) unless an applied edit of the same response is still immature
    attempt = known | ((pl.col("broken_tool_calls") > 0) & (pl.col("persistence_label") != "unknown"))
    return {
        "edit_persistence_rate": (persisted, attempt.cast(pl.Int64)),
        "shown_edit_persistence_rate": (persisted, known.cast(pl.Int64)),
        "dissatisfied_followup_rate": (((pl.col("followup_status") == "dissatisfied")
                                        | pl.col("question_unnecessary").fill_null(False)).cast(pl.Int64), None),
        "broken_tool_call_rate": ((pl.col("broken_tool_calls") > 0).cast(pl.Int64), None),
        "edit_rate": ((pl.col("response_kind") == "edit").cast(pl.Int64), None),
        "clarification_rate": ((pl.col("response_kind") == "question").cast(pl.Int64), None),
        "tokens_per_response": (pl.col("completion_tokens").cast(pl.Float64), None),
        "reward_mean": (pl.col("reward").cast(pl.Float64), None),
    }


def num_col(metric: str) -> str:
    return f"{metric}_num"


def den_col(metric: str) -> str:
    """The unit-stats column holding the metric's denominator sum (`n` when every row counts once)."""
    return f"{metric}_den" if _terms()[metric][1] is not None else "n"


def unit_stats(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Per-user sums (see the module docstring) plus `unknown_labels` (persistence_label == "unknown": immature,
    excluded from edit persistence) and `known_labels`."""
    terms = _terms()
    aggs = [pl.len().alias("n")]
    for m in RATIO_METRICS:
        num, den = terms[m]
        aggs.append(num.sum().cast(pl.Float64).alias(num_col(m)))
        if den is not None:
            aggs.append(den.sum().cast(pl.Float64).alias(f"{m}_den"))
    aggs += [(pl.col("persistence_label") == "unknown").sum().alias("unknown_labels"),
             (pl.col("persistence_label") == "known").sum().alias("known_labels")]
    return rows.group_by(list(KEYS)).agg(aggs)


def sum_columns() -> list[str]:
    """Every additive column of unit stats (what re-aggregation sums)."""
    cols = ["n"]
    for m in RATIO_METRICS:
        cols.append(num_col(m))
        if den_col(m) != "n":
            cols.append(den_col(m))
    return cols + ["unknown_labels", "known_labels"]


def rollup(units: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Sum unit stats up to the grain `by` (which must keep `user_id` to stay per-user)."""
    return units.group_by(by).agg([pl.col(c).sum() for c in sum_columns()])


def rates(units: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Point estimates per group `by`: each ratio metric's sum(num)/sum(den), rows, users, unknown-label share."""
    agg = units.group_by(by).agg([pl.col(c).sum() for c in sum_columns()] + [pl.col("user_id").n_unique()
                                                                               .alias("users")])
    out = agg.select(
        *by, "n", "users",
        *[(pl.col(num_col(m)) / pl.col(den_col(m))).fill_nan(None).alias(m) for m in RATIO_METRICS],
        unknown_label_share=(pl.col("unknown_labels") / (pl.col("unknown_labels") + pl.col("known_labels")))
        .fill_nan(None))
    return out.sort(by)
