"""Long loops in training (docs/trainer.md, "Long loops"): a background task's requests train once, when their
task's outcome row comes out, on their own reward plus the outcome reward the whole chain shares.

    rows, counts = with_outcomes(window_rows, outcome_rows, read_table, weight)

  * the cycle's reward rows of background tasks (a `task_id`) are held back (`held_for_outcome`): their outcome
    is hours away, and a sample trains once;
  * each outcome row of the cycle brings its request's reward row -- from this cycle's window or an earlier
    one (`read_table()` reads the whole table, only when some are from earlier windows) -- with
    reward = reward + weight * r_outcome and `chain` = true (the selection's `outcome_staleness` applies);
  * an outcome row whose reward row is nowhere is counted (`outcome_without_reward_row`): the reward job emits
    a request's reward row no later than its outcome row, so this means a table was pruned or rewritten.
"""

from __future__ import annotations

from typing import Callable

import polars as pl


def with_outcomes(rows: pl.DataFrame, outcomes: pl.DataFrame, read_table: Callable[[], pl.DataFrame],
                  weight: float) -> tuple[pl.DataFrame, dict[str, int]]:
    """The cycle's training rows: `rows` (this window's reward rows) without background tasks' requests, plus the
    reward rows of the requests in `outcomes` (this window's outcome rows), reweighted. Adds the columns
    `r_outcome` (0 for interactive rows) and `chain`."""
    task = pl.col("task_id").is_not_null() if "task_id" in rows.columns else pl.lit(False)
    plain = rows.filter(~task).with_columns(r_outcome=pl.lit(0.0), chain=pl.lit(False))
    held = rows.filter(task)
    wanted = outcomes.select("request_id", "r_outcome")
    found = rows.join(wanted, on="request_id", how="semi")
    if found.height < wanted.height:   # some chain requests were emitted in earlier cycles
        found = read_table().join(wanted, on="request_id", how="semi").unique("request_id", keep="first")
    chain = (found.join(wanted, on="request_id")
             .with_columns(reward=pl.col("reward") + weight * pl.col("r_outcome"), chain=pl.lit(True)))
    counts = {"outcome_rows": outcomes.height,
              "outcome_rows_known": int((outcomes["outcome_label"] == "known").sum()),
              "chain_rows": chain.height,
              "held_for_outcome": held.join(wanted, on="request_id", how="anti").height,
              "outcome_without_reward_row": wanted.height - chain.height}
    return pl.concat([plain, chain.select(plain.columns)], how="vertical_relaxed").sort("request_id"), counts
