"""The A/B's running totals over every cycle so far, kept with each cycle so that the next one adds its own rows'
sums and reads nothing older.

The cumulative results of a cycle (cycle.py: the always-valid interval and p-value, the cumulative SRM check) need,
over every cycle so far, only sums:
  * per (arm, user_id), every additive column of the unit stats (rates.sum_columns): the delta-method moments
    sum a user's numerators and denominators over checkpoints, orgs and cycles, and the SRM check counts the users;
  * per (arm, bucket, bin), the latency counts: the cumulative quantiles and their bucket bootstrap.
So the totals after cycle k are the totals after cycle k - 1 plus cycle k's frames, grouped again (`advance`).
Their size is the number of users and latency bins, not the number of cycles. Sums of integers are exact; the
float sums equal those of one computation over every cycle's unit stats up to rounding (the order of addition).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pipelines.metrics.rates import sum_columns

UNIT_KEYS = ["arm", "user_id"]
LATENCY_KEYS = ["arm", "bucket", "bin"]


@dataclass(frozen=True)
class Totals:
    units: pl.DataFrame     # arm, user_id, every sum column of the unit stats
    latency: pl.DataFrame   # arm, bucket, bin, count


def advance(before: Totals | None, units: pl.DataFrame, latency: pl.DataFrame) -> Totals:
    """The totals after a cycle whose unit stats and latency histogram are `units` and `latency`, given the totals
    `before` it (None: the first cycle)."""
    u = units.select(*UNIT_KEYS, *(pl.col(c).cast(pl.Float64 if units[c].dtype.is_float() else pl.Int64)
                                   for c in sum_columns()))
    h = latency.select(*LATENCY_KEYS, pl.col("count").cast(pl.Int64))
    if before is not None:
        u = pl.concat([before.units, u], how="vertical_relaxed")
        h = pl.concat([before.latency, h], how="vertical_relaxed")
    return Totals(u.group_by(UNIT_KEYS).agg(pl.col(c).sum() for c in sum_columns()).sort(UNIT_KEYS),
                  h.group_by(LATENCY_KEYS).agg(pl.col("count").sum()).sort(LATENCY_KEYS))


def rebuild(cycles: list[tuple[pl.DataFrame, pl.DataFrame]], base: Totals | None = None) -> Totals | None:
    """The totals after the cycles whose (unit stats, latency histogram) are `cycles`, oldest first, on top of
    `base` (the totals over the cycles before them whose frames retention folded, `MetricsStore.folded`): for a
    store whose last cycle has no totals kept (written before they were, or made stale by recomputing an earlier
    cycle), and for folding."""
    if not cycles:
        return base
    return advance(base, pl.concat([u for u, _ in cycles], how="vertical_relaxed"),
                   pl.concat([h for _, h in cycles], how="vertical_relaxed"))
