"""Which reward rows a training run may use (docs/trainer.md): on-policy first, stale rows only within a bound.

Rules, in order (each dropped row is counted under its reason):
  1. refuse the whole run if any row is immature (mature_time after the cycle's as_of) or carries no trainable
     content (empty token ids: privacy mode strips them; the reward job never emits such rows, so one here means
     the table is corrupt) -- a clear error, never a silent drop;
  2. keep rows served by the current champion;
  3. keep rows served by one of the champion's ancestors at most `staleness` versions back (their tokens were
     sampled from an older policy; the loss corrects them per token with truncated importance weights from the
     logged behaviour log-probs, see `trainer.losses`); a background task's chain rows (`chain`, trainer/outcomes.py)
     at most `chain_staleness` back, as their outcome comes hours after them;
  4. drop every other row (`other_version`), and rows without a reward (`no_reward`);
  5. drop the rows whose stream the client left before the answer ended (`cut_short`), unless
     `train_on_cut_short`: the client, not the policy, ended those sequences, so their tokens do not end where the
     policy would have, and their reward judges an answer the policy never finished. A cut-short row with no
     completion token is dropped either way (nothing was sampled);
  6. refuse if fewer than `min_rows` remain;
  7. with `max_rows`, keep at most that many: on-policy rows before stale ones, each group in a seeded random
     order (an unbiased sample of the cycle's traffic; the rest are counted as `dropped_over_max_rows`); the
     samples of one request (`group_id`) are drawn together, so the cap does not thin out their group baseline.

A table written before reward rows had `group_id` and `cut_short` reads as single samples that ran to the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import polars as pl


class SelectionError(ValueError):
    """The data cannot be trained on as it is; the message says why."""


@dataclass
class Selection:
    rows: pl.DataFrame                     # the kept rows, with a `stale` column (bool)
    counts: dict[str, int] = field(default_factory=dict)   # kept_on_policy, kept_stale, dropped_<reason>


def _with_v4_columns(rows: pl.DataFrame) -> pl.DataFrame:
    """`group_id` and `cut_short` as a table written before them reads (single samples that ran to the end), and
    `chain` (rows of no background task) when the rows did not go through trainer.outcomes."""
    missing = {"group_id": pl.lit(None, pl.String), "cut_short": pl.lit(False), "chain": pl.lit(False)}
    return rows.with_columns([v.alias(k) for k, v in missing.items() if k not in rows.columns])


def _refuse_untrainable(rows: pl.DataFrame, as_of: datetime | None) -> None:
    """Rule 1. A cut-short row may have an empty completion (the client left before the first token): not a sign
    of stripped content, it is dropped under `cut_short`."""
    if as_of is not None and rows.height:
        immature = rows.filter(pl.col("mature_time") > as_of).height
        if immature:
            raise SelectionError(f"{immature} reward row(s) mature after {as_of.isoformat()}: their labels can "
                                 "still change; train only on mature rows (rerun the reward job for this cycle)")
    empty = rows.filter((pl.col("prompt_token_ids").list.len() == 0)
                        | ((pl.col("completion_token_ids").list.len() == 0) & ~pl.col("cut_short")))
    if empty.height:
        raise SelectionError(f"{empty.height} reward row(s) have no token ids (privacy-mode or stripped content, "
                             f"e.g. request {empty['request_id'][0]}): refusing to train on this table")


def select_rows(rows: pl.DataFrame, champion: str, ancestors: list[str], staleness: int, min_rows: int,
                as_of: datetime | None = None, max_rows: int = 0, seed: int = 0,
                train_on_cut_short: bool = False, chain_staleness: int | None = None) -> Selection:
    """`ancestors`: the champion's parent, grandparent, ... (nearest first). `max_rows` 0: no cap.
    `chain_staleness`: the bound for chain rows (None: `staleness`)."""
    rows = _with_v4_columns(rows)
    _refuse_untrainable(rows, as_of)
    version = pl.col("policy_version")
    recent = [str(champion), *(str(v) for v in ancestors[:staleness])]
    chain_recent = [str(champion), *(str(v) for v in ancestors[:staleness if chain_staleness is None
                                                               else chain_staleness])]
    usable = pl.when(pl.col("chain")).then(version.is_in(chain_recent)).otherwise(version.is_in(recent))
    cut = pl.col("cut_short") & (pl.lit(not train_on_cut_short) | (pl.col("completion_token_ids").list.len() == 0))
    labelled = rows.with_columns(
        reason=pl.when(pl.col("reward").is_null()).then(pl.lit("no_reward"))
        .when(~usable).then(pl.lit("other_version"))
        .when(cut).then(pl.lit("cut_short"))
        .when(version == str(champion)).then(pl.lit("on_policy"))
        .otherwise(pl.lit("stale")))
    counts = {"rows_read": rows.height}
    by_reason = dict(labelled.group_by("reason").len().iter_rows())
    counts["kept_on_policy"] = by_reason.get("on_policy", 0)
    counts["kept_stale"] = by_reason.get("stale", 0)
    counts["dropped_other_version"] = by_reason.get("other_version", 0)
    counts["dropped_no_reward"] = by_reason.get("no_reward", 0)
    counts["dropped_cut_short"] = by_reason.get("cut_short", 0)
    kept = (labelled.filter(pl.col("reason").is_in(["on_policy", "stale"]))
            .with_columns(stale=pl.col("reason") == "stale").drop("reason").sort("request_id"))
    if kept.height < min_rows:
        raise SelectionError(f"only {kept.height} usable reward row(s) (champion {champion}: "
                             f"{counts['kept_on_policy']} on-policy, {counts['kept_stale']} within staleness "
                             f"{staleness}; dropped {counts['dropped_other_version']} from other versions, "
                             f"{counts['dropped_cut_short']} cut short); the minimum batch is {min_rows}")
    counts["dropped_over_max_rows"] = 0
    if max_rows and kept.height > max_rows:
        counts["dropped_over_max_rows"] = kept.height - max_rows
        order = pl.coalesce("group_id", "request_id").hash(seed)
        kept = kept.sort([pl.col("stale"), order, pl.col("request_id")]).head(max_rows).sort("request_id")
    return Selection(kept, counts)
