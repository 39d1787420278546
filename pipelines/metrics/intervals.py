"""Fixed-horizon intervals for ratio metrics by the delta method, users as the unit (Deng, Knoblich, Lu 2018,
"Applying the Delta Method in Metric Analytics", KDD).

For one arm with users u = 1..n, per-user sums Y_u (numerator) and N_u (denominator), the metric is
r = sum(Y) / sum(N) = Ybar / Nbar and, to first order,

    Var(r) = (s_YY - 2 r s_YN + r^2 s_NN) / (n Nbar^2)

with s the sample (co)variances of the per-user sums (n - 1 in the denominator). Arms are independent, so the
absolute change d = r_T - r_C has Var(d) = Var(r_T) + Var(r_C), and the relative change rho = r_T / r_C - 1 has

    Var(rho) = Var(r_T) / r_C^2 + r_T^2 Var(r_C) / r_C^4.

Intervals are est +- z_{1-alpha/2} sqrt(Var); p-values two-sided, normal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl
from scipy.stats import norm

from pipelines.metrics.rates import den_col, num_col


@dataclass(frozen=True)
class Moments:
    """Sums over users of Y, N, Y^2, N^2, Y*N (one arm, one metric)."""

    n: int
    sy: float
    sn: float
    syy: float
    snn: float
    syn: float

    @property
    def ratio(self) -> float | None:
        return self.sy / self.sn if self.sn > 0 else None

    @property
    def variance(self) -> float | None:
        """Delta-method variance of the ratio (None with fewer than 2 users or no denominator)."""
        r = self.ratio
        if r is None or self.n < 2:
            return None
        n = self.n
        s_yy = (self.syy - self.sy * self.sy / n) / (n - 1)
        s_nn = (self.snn - self.sn * self.sn / n) / (n - 1)
        s_yn = (self.syn - self.sy * self.sn / n) / (n - 1)
        nbar = self.sn / n
        return max(s_yy - 2 * r * s_yn + r * r * s_nn, 0.0) / (n * nbar * nbar)


def moments(units: pl.DataFrame, metric: str, by: list[str] | None = None) -> pl.DataFrame:
    """Per group `by` (e.g. ["arm"]): the `Moments` fields of `metric`, users being (by..., user_id) after
    summing every row of the same user (a user seen under two checkpoints or orgs is one unit)."""
    by = list(by or [])
    y, nn = num_col(metric), den_col(metric)
    per_user = units.group_by([*by, "user_id"]).agg(pl.col(y).sum().alias("Y"), pl.col(nn).sum().alias("N"))
    aggs = [pl.len().alias("n"), pl.col("Y").sum().alias("sy"), pl.col("N").sum().alias("sn"),
            (pl.col("Y") ** 2).sum().alias("syy"), (pl.col("N") ** 2).sum().alias("snn"),
            (pl.col("Y") * pl.col("N")).sum().alias("syn")]
    return per_user.group_by(by).agg(aggs) if by else per_user.select(aggs)

def moments_of(frame: pl.DataFrame, **where) -> Moments | None:
    """The `Moments` in the row of `frame` (from `moments`) matching `where`, or None when there is none."""
    for k, v in where.items():
        frame = frame.filter(pl.col(k) == v)
    if frame.is_empty():
        return None
    r = frame.row(0, named=True)
    return Moments(int(r["n"]), float(r["sy"]), float(r["sn"]), float(r["syy"]), float(r["snn"]), float(r["syn"]))


def z_value(alpha: float) -> float:
    return float(norm.ppf(1 - alpha / 2))


@dataclass(frozen=True)
class Change:
    """Treatment vs control for one metric: point estimates, the change on both scales with its variance, and
    the normal interval on the relative scale (`low`, `high`, `p_value`); `on("absolute")` gives the other."""

    control: float | None
    treatment: float | None
    absolute: float | None
    relative: float | None
    var_relative: float | None
    low: float | None         # interval on the relative change
    high: float | None
    p_value: float | None
    var_absolute: float | None = None
    alpha: float = 0.05

    def on(self, scale: str) -> tuple[float | None, float | None, float | None, float | None, float | None]:
        """(estimate, variance, low, high, p) of the change on `scale` ("relative" | "absolute")."""
        if scale == "relative":
            return self.relative, self.var_relative, self.low, self.high, self.p_value
        low, high, p = normal_interval(self.absolute, self.var_absolute, self.alpha)
        return self.absolute, self.var_absolute, low, high, p


def normal_interval(est: float | None, var: float | None,
                    alpha: float) -> tuple[float | None, float | None, float | None]:
    """(low, high, two-sided p) of the normal interval of `est` with variance `var`; Nones when either is missing."""
    if est is None or var is None or not math.isfinite(var):
        return None, None, None
    se = math.sqrt(var)
    z = z_value(alpha)
    p = 2 * float(norm.sf(abs(est) / se)) if se > 0 else (1.0 if est == 0 else 0.0)
    return est - z * se, est + z * se, p


def relative_change(r_c: float | None, v_c: float | None, r_t: float | None, v_t: float | None,
                    alpha: float) -> Change:
    """rho = r_T / r_C - 1 with its delta-method variance (module docstring) and interval; also the absolute
    change d = r_T - r_C with Var(d) = v_T + v_C."""
    absolute = r_t - r_c if r_t is not None and r_c is not None else None
    var_abs = v_t + v_c if v_t is not None and v_c is not None else None
    if r_c is None or r_t is None or r_c == 0 or v_c is None or v_t is None:
        return Change(r_c, r_t, absolute, None if r_c in (None, 0) or r_t is None else r_t / r_c - 1,
                      None, None, None, None, var_abs, alpha)
    rel = r_t / r_c - 1
    var = v_t / r_c ** 2 + r_t ** 2 * v_c / r_c ** 4
    low, high, p = normal_interval(rel, var, alpha)
    return Change(r_c, r_t, absolute, rel, var, low, high, p, var_abs, alpha)


def ratio_change(m_c: Moments | None, m_t: Moments | None, alpha: float) -> Change:
    """The change of a ratio metric between two arms' `Moments`."""
    return relative_change(m_c.ratio if m_c else None, m_c.variance if m_c else None,
                           m_t.ratio if m_t else None, m_t.variance if m_t else None, alpha)
