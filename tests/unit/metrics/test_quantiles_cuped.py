"""Latency quantiles (hand values, numpy's inverted CDF, bootstrap error vs the asymptotic formula) and CUPED
(a hand-computed fixture, variance reduction rho^2 and no bias by simulation)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from pipelines.metrics.cuped import cuped_arms, cuped_change
from pipelines.metrics.quantiles import latency_histogram, quantile, quantile_change
from pipelines.metrics.rates import unit_stats
from tests.unit.metrics.helpers import frame, row

RES = 0.005


def _hist(latencies, arm="control", users=None):
    users = users or [f"u{i}" for i in range(len(latencies))]
    rows = [row(u, arm, latency=float(x)) for u, x in zip(users, latencies)]
    return latency_histogram(frame(rows).lazy(), 256, RES).collect()


def test_quantile_hand_values():
    assert quantile(_hist([100, 200, 300]), 0.5, RES) == pytest.approx(200, rel=RES / 2)
    assert quantile(_hist(list(range(1, 101))), 0.95, RES) == pytest.approx(95, rel=RES / 2)
    assert quantile(_hist([40, 10, 30, 20]), 0.5, RES) == pytest.approx(20, rel=RES / 2)   # inverted CDF: 2nd of 4


def test_quantile_matches_numpy_inverted_cdf():
    x = np.random.default_rng(3).lognormal(6.5, 0.7, 5000)
    h = _hist(x)
    for q in (0.5, 0.9, 0.95, 0.99):
        assert quantile(h, q, RES) == pytest.approx(np.quantile(x, q, method="inverted_cdf"), rel=RES / 2 + 1e-12)


def test_bootstrap_error_of_median_change_matches_asymptotic_formula():
    """Log-normal latencies, sigma 1, n requests per arm (one per user): Var(median) = (pi/2) sigma^2 m^2 / n, so
    the relative change of medians has Var = pi sigma^2 / n (two independent arms)."""
    rng = np.random.default_rng(5)
    n = 5000
    hc = _hist(rng.lognormal(6.5, 1.0, n), "control", [f"c{i}" for i in range(n)])
    ht = _hist(rng.lognormal(6.5, 1.0, n) * 0.9, "treatment", [f"t{i}" for i in range(n)])
    ch = quantile_change(hc, ht, 0.5, RES, 0.05, resamples=600, seed=1)
    assert math.sqrt(ch.var_relative) == pytest.approx(math.sqrt(math.pi / n), rel=0.15)
    assert abs(ch.relative - (-0.1)) < 4 * math.sqrt(math.pi / n)    # the estimate is where it should be


def test_cuped_hand_fixture():
    # N = M = 1 per user: l = Y - r, k = X - x_arm, theta pooled = sum(l k) / sum(k^2) = (0.5 + 0.5) / (0.75 + 1.0)
    c_y, c_x, t_y, t_x = [1, 0, 1, 0], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 0, 0]

    def rows(ys, arm, p):
        return [row(f"{p}{i}", arm, kind="question" if y else "answer") for i, y in enumerate(ys)]
    cur = unit_stats(frame(rows(c_y, "control", "c") + rows(t_y, "treatment", "t")).lazy()).collect()
    pre = unit_stats(frame(rows(c_x, "control", "c") + rows(t_x, "treatment", "t")).lazy()).collect()
    arms = cuped_arms(cur, pre, "clarification_rate", ("control", "treatment"))
    theta = 4 / 7
    # adjusted = r - theta (x_arm - x_pooled), x_pooled = 5/8
    assert arms["control"].adjusted == pytest.approx(0.5 - theta * (0.75 - 0.625))
    assert arms["treatment"].adjusted == pytest.approx(0.75 - theta * (0.5 - 0.625))
    # control: l - theta k = [5, -1, 5, -9] / 14 -> sample variance 132/588, over n = 4
    assert arms["control"].variance == pytest.approx(132 / 588 / 4)
    assert arms["control"].variance_unadjusted == pytest.approx(1 / 3 / 4)   # var([.5, -.5, .5, -.5]) / 4


def _cuped_sim(rng, users=2000, effect=0.05, rho_noise=0.5):
    """Each user has a propensity; the pre-period and the experiment draw from it (correlated), treatment
    multiplies the experiment's rate by 1 + effect."""
    prop = rng.beta(2, 5, users)
    treated = rng.random(users) < 0.5
    n_pre, n_cur = rng.poisson(8, users) + 1, rng.poisson(8, users) + 1
    x = rng.binomial(n_pre, prop)
    y = rng.binomial(n_cur, np.clip(prop * np.where(treated, 1 + effect, 1.0), 0, 1))
    rows_cur, rows_pre = [], []
    for i in range(users):
        arm = "treatment" if treated[i] else "control"
        rows_cur += [row(f"u{i}", arm, kind="question" if j < y[i] else "answer") for j in range(n_cur[i])]
        rows_pre += [row(f"u{i}", "control", kind="question" if j < x[i] else "answer") for j in range(n_pre[i])]
    return unit_stats(frame(rows_cur).lazy()).collect(), unit_stats(frame(rows_pre).lazy()).collect()


def test_cuped_reduces_variance_and_keeps_the_estimate():
    rng = np.random.default_rng(9)
    cur, pre = _cuped_sim(rng)
    arms = cuped_arms(cur, pre, "clarification_rate", ("control", "treatment"))
    reduction = 1 - sum(a.variance for a in arms.values()) / sum(a.variance_unadjusted for a in arms.values())
    assert 0.2 < reduction < 0.8            # user propensity is shared: a large part of the variance goes
    ch = cuped_change(cur, pre, "clarification_rate", "control", "treatment", 0.05)
    assert ch.low < 0.05 < ch.high


def test_cuped_without_pre_period_users_changes_nothing():
    cur, _ = _cuped_sim(np.random.default_rng(1), users=200)
    empty_pre = cur.filter(pl.col("user_id") == "nobody")
    assert cuped_arms(cur, empty_pre, "clarification_rate", ("control", "treatment")) == {}
