"""Specialized against shared, org by org: one arm's change over another within each org, and the pooled change
over the orgs (docs/ab-dashboard.md, "By organization").

    result = by_org(unit_stats(rows).collect(), "edit_persistence_rate", base="treatment", arm="specialized")
    result["orgs"]["o1"]     # {diff, ci_low, ci_high, base, arm, users: {base, arm}}
    result["pooled"]         # {diff, ci_low, ci_high, orgs}

Within an org the change is the absolute difference of the two arms' ratio metric, users as the unit, with the
delta-method interval of the A/B table (intervals.py). Users are assigned to arms by the router's hash whatever
their org, so each org is a randomized experiment of its own (a stratum); the pooled change is the
inverse-variance weighted mean of the orgs' changes, d = sum(w_k d_k) / sum(w_k) with w_k = 1 / Var(d_k) and
Var(d) = 1 / sum(w_k), over the orgs where both arms have at least two users.

The A/B table's other checks apply here too, with `shares` and `tau` given: each org's sample-ratio mismatch
(srm.py: its users in the two arms against the arms' shares), and the always-valid interval of each change and of
the pooled one (sequential.py, mixing over tau x the base arm's rate: the same relative `ab.sequential_tau`), which
may be looked at after every cycle.
"""

from __future__ import annotations

import math

import polars as pl

from pipelines.metrics import sequential
from pipelines.metrics.intervals import normal_interval, moments, moments_of, ratio_change
from pipelines.metrics.srm import srm_check


def by_org(units: pl.DataFrame, metric: str, base: str = "treatment", arm: str = "specialized",
           alpha: float = 0.05, shares: dict[str, float] | None = None, tau: float | None = None,
           srm_threshold: float = 0.001) -> dict:
    """{"orgs": {org: change}, "pooled": change}: `arm` minus `base` on `metric` within each org (unit stats of
    `rates.unit_stats`), and pooled over the orgs; None fields where a change cannot be estimated. With `shares`
    ({arm: share} of the two arms) each org's change has `srm` (srm.SrmResult.to_dict()); with `tau` (relative)
    every change has `seq_low`, `seq_high` (always valid)."""
    m = moments(units.filter(pl.col("arm").is_in([base, arm])), metric, by=["org_id", "arm"])
    orgs: dict[str, dict] = {}
    weights = []
    for org in sorted(set(m["org_id"].to_list())):
        mb, ma = moments_of(m, org_id=org, arm=base), moments_of(m, org_id=org, arm=arm)
        change = ratio_change(mb, ma, alpha)
        diff, var, low, high, _ = change.on("absolute")
        users = {base: mb.n if mb else 0, arm: ma.n if ma else 0}
        orgs[org] = {"diff": diff, "ci_low": low, "ci_high": high, "base": change.control, "arm": change.treatment,
                     "users": users}
        if shares is not None and sum(users.values()):
            orgs[org]["srm"] = srm_check(users, {a: shares[a] for a in (base, arm)}, srm_threshold).to_dict()
        if tau is not None:
            scale = sequential.absolute_tau(tau, change.control)
            orgs[org]["seq_low"], orgs[org]["seq_high"] = sequential.interval(diff, var, scale, alpha)
        if diff is not None and var is not None and var > 0 and math.isfinite(var):
            weights.append((1.0 / var, diff, scale if tau is not None else None))
    pooled = pooled_change([(d, 1.0 / w) for w, d, _ in weights], alpha)
    if weights:
        total = sum(w for w, _, _ in weights)
        diff = pooled["diff"]
        if tau is not None:   # the orgs' mixing scales, weighted as their changes
            scale = sum(w * t for w, _, t in weights) / total
            pooled["seq_low"], pooled["seq_high"] = sequential.interval(diff, 1.0 / total, scale, alpha)
    return {"orgs": orgs, "pooled": pooled}


def pooled_change(changes: list[tuple[float, float]], alpha: float = 0.05) -> dict:
    """{diff, ci_low, ci_high, orgs}: the inverse-variance weighted mean of the changes [(diff, variance), ...]
    (each variance > 0), d = sum(w_k d_k) / sum(w_k) with w_k = 1 / Var(d_k) and Var(d) = 1 / sum(w_k); None
    fields when there are none."""
    out = {"diff": None, "ci_low": None, "ci_high": None, "orgs": len(changes)}
    if changes:
        total = sum(1.0 / v for _, v in changes)
        diff = sum(d / v for d, v in changes) / total
        low, high, _ = normal_interval(diff, 1.0 / total, alpha)
        out.update(diff=diff, ci_low=low, ci_high=high)
    return out


def wins(result: dict) -> int:
    """How many orgs' changes are above zero (the point estimate)."""
    return sum(1 for c in result["orgs"].values() if c["diff"] is not None and c["diff"] > 0)
