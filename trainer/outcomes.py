"""Long loops in training (docs/trainer.md, "Long loops"): a background task's requests train once, when their
task's outcome row comes out, on their own reward plus the outcome reward the whole chain shares.

    rows, counts = with_outcomes(window_rows, outcome_rows, read_table, weight)

  * the cycle's reward rows of background tasks (a `task_id`) are held back (`held_for_outcome`): their outcome
    is hours away, and a sample trains once;
  * each outcome row of the cycle brings its request's reward row -- from this cycle's window or an earlier
    one (`read_table(missing)` looks up the outcome rows whose reward rows are not in the window, only when
    there are some: the trainer reads just their versions' partitions and request times,
    `schemas.reward_table.read_reward_rows`, which lie within the long horizon before the outcome) -- with
    reward = reward + weight * r_outcome and `chain` = true (the selection's `outcome_staleness` applies);
  * an outcome row whose reward row is nowhere is counted (`outcome_without_reward_row`): the reward job emits
    a request's reward row no later than its outcome row, so this means a table was pruned or rewritten.
"""

from __future__ import annotations

from typing import Callable

import polars as pl


def with_outcomes(rows: pl.DataFrame, outcomes: pl.DataFrame, read_table: Callable[[pl.DataFrame], pl.DataFrame],
                  weight: float) -> tuple[pl.DataFrame, dict[str, int]]:
    """The cycle's training rows: `rows` (this window's reward rows) without background tasks' requests, plus the
    reward rows of the requests in `outcomes` (this window's outcome rows), reweighted. Adds the columns
    `r_outcome` (0 for interactive rows) and `chain`. `read_table(missing)`: reward rows from earlier windows
    holding those of the outcome rows `missing` (any others are ignored)."""
    task = pl.col("task_id").is_not_null() if "task_id" in rows.columns else pl.lit(False)
    plain = rows.filter(~task).with_columns(r_outcome=pl.lit(0.0), chain=pl.lit(False))
    held = rows.filter(task)
    wanted = outcomes.select("request_id", "r_outcome")
    found = rows.join(wanted, on="request_id", how="semi")
    missing = outcomes.join(found, on="request_id", how="anti")
    if missing.height:   # some chain requests were emitted in earlier cycles
        earlier = read_table(missing).join(missing, on="request_id", how="semi").select(found.columns)
        found = pl.concat([found, earlier], how="vertical_relaxed").unique("request_id", keep="first")
    chain = (found.join(wanted, on="request_id")
             .with_columns(reward=pl.col("reward") + weight * pl.col("r_outcome"), chain=pl.lit(True)))
    counts = {"outcome_rows": outcomes.height,
              "outcome_rows_known": int((outcomes["outcome_label"] == "known").sum()),
              "chain_rows": chain.height,
              "held_for_outcome": held.join(wanted, on="request_id", how="anti").height,
              "outcome_without_reward_row": wanted.height - chain.height}
    return pl.concat([plain, chain.select(plain.columns)], how="vertical_relaxed").sort("request_id"), counts


def read_chain_rows(table, missing: pl.DataFrame) -> pl.DataFrame:
    """The reward rows of the outcome rows `missing` (their requests' rows from earlier windows), read from the
    reward table `table` without the rest of its history: only the partitions of the versions that served them and
    the row groups of their request times (`schemas.reward_table.read_reward_rows`). An outcome row comes out at
    most rewards.long_horizon_s + outcome_lateness_s after its request, so the times read span that much."""
    from schemas.reward_table import read_reward_rows

    times = missing["request_time"]
    return read_reward_rows(table, missing["request_id"], missing["policy_version"], times.min(), times.max())
