"""CUPED for ratio metrics: less variance from each user's behaviour before the experiment (Deng, Xu, Kohavi,
Walker 2013, "Improving the Sensitivity of Online Controlled Experiments by Utilizing Pre-Experiment Data"; the
ratio form by linearization as in Deng et al. 2018).

Per arm, the metric r = sum(Y) / sum(N) over users and the same metric in the pre-period x = sum(X) / sum(M)
(users without pre-period data contribute X = M = 0). Their delta-method influence values per user are

    l_u = (Y_u - r N_u) / Nbar,    k_u = (X_u - x M_u) / Mbar,

so r - E[r] ~ mean(l) and x - E[x] ~ mean(k). With theta = Cov(l, k) / Var(k), pooled over both arms (so that it
does not depend on the assignment), the adjusted estimate is r_cv = r - theta (x_arm - x_pooled), with variance
Var(l - theta k) / n. The covariate must not be affected by the treatment: it has to come from before the
arms split (a pre-period in which both groups of users were served the same checkpoint). The adjustment then
leaves the expected change unchanged and removes the share rho^2 of the variance, rho = Corr(l, k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipelines.metrics.intervals import Change, relative_change
from pipelines.metrics.rates import den_col, num_col


@dataclass(frozen=True)
class CupedArm:
    ratio: float
    adjusted: float
    variance: float           # of the adjusted ratio
    variance_unadjusted: float
    users: int


def _per_user(units: pl.DataFrame, metric: str, by: str) -> pl.DataFrame:
    return units.group_by([by, "user_id"]).agg(pl.col(num_col(metric)).sum().alias("Y"),
                                               pl.col(den_col(metric)).sum().alias("N"))


def cuped_arms(units: pl.DataFrame, pre: pl.DataFrame, metric: str, arms: tuple[str, str]) -> dict[str, CupedArm]:
    """Adjusted ratio and variance per arm in `arms`; `pre` are unit stats of the pre-period (any arm)."""
    cur = _per_user(units.filter(pl.col("arm").is_in(list(arms))), metric, "arm")
    before = pre.group_by("user_id").agg(pl.col(num_col(metric)).sum().alias("X"),
                                         pl.col(den_col(metric)).sum().alias("M"))
    joined = cur.join(before, on="user_id", how="left").with_columns(pl.col("X").fill_null(0.0),
                                                                     pl.col("M").fill_null(0.0))
    pooled_x = joined["X"].sum() / joined["M"].sum() if joined["M"].sum() > 0 else None
    infl: dict[str, tuple[np.ndarray, np.ndarray, float, float]] = {}
    for arm in arms:
        a = joined.filter(pl.col("arm") == arm)
        if a.height < 2 or a["N"].sum() <= 0:
            return {}
        y, n_, x, m = (a[c].to_numpy().astype(np.float64) for c in ("Y", "N", "X", "M"))
        r = y.sum() / n_.sum()
        xr = x.sum() / m.sum() if m.sum() > 0 else 0.0
        l_u = (y - r * n_) / n_.mean()
        k_u = (x - xr * m) / m.mean() if m.sum() > 0 else np.zeros_like(x)
        infl[arm] = (l_u, k_u, r, xr)
    if pooled_x is None:
        return {}
    # theta pooled over arms, from within-arm (co)variances weighted by degrees of freedom
    cov = sum(np.cov(l_u, k_u, ddof=1)[0, 1] * (len(l_u) - 1) for l_u, k_u, _, _ in infl.values())
    var_k = sum(np.var(k_u, ddof=1) * (len(k_u) - 1) for _, k_u, _, _ in infl.values())
    theta = cov / var_k if var_k > 0 else 0.0
    out = {}
    for arm, (l_u, k_u, r, xr) in infl.items():
        n = len(l_u)
        out[arm] = CupedArm(ratio=float(r), adjusted=float(r - theta * (xr - pooled_x)),
                            variance=float(np.var(l_u - theta * k_u, ddof=1) / n),
                            variance_unadjusted=float(np.var(l_u, ddof=1) / n), users=n)
    return out


def cuped_change(units: pl.DataFrame, pre: pl.DataFrame, metric: str, control: str, treatment: str,
                 alpha: float) -> Change | None:
    """The CUPED-adjusted relative change (None when either arm has fewer than two users or no pre-period)."""
    arms = cuped_arms(units, pre, metric, (control, treatment))
    if not arms:
        return None
    c, t = arms[control], arms[treatment]
    return relative_change(c.adjusted, c.variance, t.adjusted, t.variance, alpha)
