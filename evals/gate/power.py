"""Power and suite size of the primary test (one-sided paired non-inferiority on resolved rate, stats.py).

A pair's difference d = a − b takes values −1, 0, 1; with discordant rate π (P(d ≠ 0)) and true difference Δ its
variance is π − Δ² (Connor 1987, "Sample size for testing differences in proportions for the paired-sample design",
Biometrics 43:207-211). K correlated samples per task inflate the variance of the mean by the design effect
1 + (K−1)·ICC (Donner & Klar 2000, *Design and Analysis of Cluster Randomization Trials*, ch. 5). The test passes
when D − t·se > −margin, so its power is that of a one-sample t test on task means: a noncentral t with T−1
degrees of freedom and noncentrality (Δ + margin)/se. The standard error is floored like the test's
(Agresti-Min), so the helper never promises more than the test can deliver.

`estimate_design` reads π and the ICC off a past gate's pairs, to size the next suite.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def expected_se(n_tasks: int, samples_per_task: int, discordant_rate: float, true_difference: float = 0.0,
                icc: float = 0.0) -> float:
    n = n_tasks * samples_per_task
    var = max(discordant_rate - true_difference ** 2, 0.0) / n * (1 + (samples_per_task - 1) * max(icc, 0.0))
    # the Agresti-Min floor at the expected cell counts
    b = n * (discordant_rate + true_difference) / 2 + 0.5
    c = n * (discordant_rate - true_difference) / 2 + 0.5
    floor = math.sqrt(max((b + c) / (n + 2) - ((b - c) / (n + 2)) ** 2, 0.0) / (n + 2))
    return max(math.sqrt(var), floor)


def ni_power(n_tasks: int, samples_per_task: int, margin: float, confidence: float, discordant_rate: float,
             true_difference: float = 0.0, icc: float = 0.0) -> float:
    """Probability that the non-inferiority test passes for a suite of `n_tasks` tasks × `samples_per_task`
    samples when the candidate's resolved rate is the champion's + `true_difference`."""
    if n_tasks < 2:
        return 0.0
    se = expected_se(n_tasks, samples_per_task, discordant_rate, true_difference, icc)
    df = n_tasks - 1
    q = float(stats.t.ppf(confidence, df))
    return float(stats.nct.sf(q, df, (true_difference + margin) / se))


def tasks_needed(power: float, samples_per_task: int, margin: float, confidence: float, discordant_rate: float,
                 true_difference: float = 0.0, icc: float = 0.0, max_tasks: int = 1_000_000) -> int | None:
    """The smallest number of tasks whose power reaches `power`, or None when even `max_tasks` do not (e.g. a
    candidate truly worse than the margin)."""
    def ok(t: int) -> bool:
        return ni_power(t, samples_per_task, margin, confidence, discordant_rate, true_difference, icc) >= power

    if not ok(max_tasks):
        return None
    lo, hi = 1, 2
    while not ok(hi):
        lo, hi = hi, min(hi * 2, max_tasks)
    while hi - lo > 1:                       # invariant: not ok(lo) (or lo = 1), ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def estimate_design(d: np.ndarray, cluster: np.ndarray) -> tuple[float, float]:
    """(discordant rate, ICC of the paired difference within a task) from observed differences d = a − b, the ICC
    by the one-way ANOVA estimator with the unbalanced-cluster size n0, clipped to [0, 1]."""
    d, cluster = np.asarray(d, dtype=float), np.asarray(cluster, dtype=int)
    n = len(d)
    if n == 0:
        return math.nan, math.nan
    disc = float(np.mean(d != 0))
    _, inv = np.unique(cluster, return_inverse=True)
    sizes = np.bincount(inv)
    g = len(sizes)
    if g < 2 or n == g:
        return disc, 0.0
    means = np.bincount(inv, weights=d) / sizes
    msb = float(np.sum(sizes * (means - d.mean()) ** 2)) / (g - 1)
    msw = float(np.sum((d - means[inv]) ** 2)) / (n - g)
    n0 = (n - float(np.sum(sizes ** 2)) / n) / (g - 1)
    denom = msb + (n0 - 1) * msw
    icc = (msb - msw) / denom if denom > 0 else 0.0
    return disc, float(min(max(icc, 0.0), 1.0))
