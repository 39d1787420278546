"""Specialized against shared, org by org: one arm's change over another within each org, and the pooled change
over the orgs (docs/ab-dashboard.md, "By organization").

    result = by_org(unit_stats(rows).collect(), "edit_persistence_rate", base="treatment", arm="specialized")
    result["orgs"]["o1"]     # {diff, ci_low, ci_high, base, arm, users: {base, arm}}
    result["pooled"]         # {diff, ci_low, ci_high, orgs}

Within an org the change is the absolute difference of the two arms' ratio metric, users as the unit, with the
delta-method interval of the A/B table (intervals.py). Users are assigned to arms by the router's hash whatever
their org, so each org is a randomized experiment of its own (a stratum); the pooled change is the
inverse-variance weighted mean of the orgs' changes, d = sum(w_k d_k) / sum(w_k) with w_k = 1 / Var(d_k) and
Var(d) = 1 / sum(w_k), over the orgs where both arms have at least two users. Sample-ratio mismatch is the A/B
table's check (srm.py), per org through its per-org breakdown.
"""

from __future__ import annotations

import math

import polars as pl

from pipelines.metrics.intervals import normal_interval, moments, moments_of, ratio_change


def by_org(units: pl.DataFrame, metric: str, base: str = "treatment", arm: str = "specialized",
           alpha: float = 0.05) -> dict:
    """{"orgs": {org: change}, "pooled": change}: `arm` minus `base` on `metric` within each org (unit stats of
    `rates.unit_stats`), and pooled over the orgs; None fields where a change cannot be estimated."""
    m = moments(units.filter(pl.col("arm").is_in([base, arm])), metric, by=["org_id", "arm"])
    orgs: dict[str, dict] = {}
    weights = []
    for org in sorted(set(m["org_id"].to_list())):
        mb, ma = moments_of(m, org_id=org, arm=base), moments_of(m, org_id=org, arm=arm)
        change = ratio_change(mb, ma, alpha)
        diff, var, low, high, _ = change.on("absolute")
        orgs[org] = {"diff": diff, "ci_low": low, "ci_high": high, "base": change.control, "arm": change.treatment,
                     "users": {base: mb.n if mb else 0, arm: ma.n if ma else 0}}
        if diff is not None and var is not None and var > 0 and math.isfinite(var):
            weights.append((1.0 / var, diff))
    pooled = {"diff": None, "ci_low": None, "ci_high": None, "orgs": len(weights)}
    if weights:
        total = sum(w for w, _ in weights)
        diff = sum(w * d for w, d in weights) / total
        low, high, _ = normal_interval(diff, 1.0 / total, alpha)
        pooled.update(diff=diff, ci_low=low, ci_high=high)
    return {"orgs": orgs, "pooled": pooled}


def wins(result: dict) -> int:
    """How many orgs' changes are above zero (the point estimate)."""
    return sum(1 for c in result["orgs"].values() if c["diff"] is not None and c["diff"] > 0)
