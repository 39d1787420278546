"""Paired comparison of two arms' binary outcomes (resolved, broken, edited, asked) over the same tasks and seeds.

The unit is a pair i = (task, sample) with outcomes a_i (candidate) and b_i (champion); the estimate is the mean
paired difference D = mean(a_i − b_i) = rate(a) − rate(b).

**Why not the textbook paired interval.** The K samples of one task share the task's difficulty, so they are not
independent pairs; an interval that treats K·T pairs as independent is too narrow by the design effect
1 + (K−1)·ICC. We use the cluster-robust standard error with the task as the cluster, as recommended for
language-model evals by Miller (2024), "Adding Error Bars to Evals: A Statistical Approach to Language Model
Evaluations", arXiv:2411.00640, §2.2 (clustered standard errors) and §3.1 (paired differences):

    se_cluster² = G/(G−1) · Σ_g (Σ_{i∈g} (d_i − D))² / n²        (G tasks, n pairs, d_i = a_i − b_i)

with the G/(G−1) small-sample factor and t quantiles on G−1 degrees of freedom (Cameron & Miller 2015, "A
Practitioner's Guide to Cluster-Robust Inference", J. Human Resources 50(2), §VI). With the same K for every task
this is exactly the one-sample t interval on per-task mean differences.

**Floor.** When (almost) every pair agrees, se_cluster collapses to 0 and a Wald interval claims certainty it does
not have. The standard error is therefore never below the paired-proportion one with Agresti & Min's (2005) add-0.5
-per-cell adjustment ("Simple improved confidence intervals for comparing matched proportions", Stat. Med.
24:729-740), which stays positive with no discordant pair. Taking the larger of a robust and a conventional
standard error is also Angrist & Pischke's guard against the downward small-sample bias of robust ones (*Mostly
Harmless Econometrics*, 2009, §8.2). It only widens the interval (fail closed); the power helper (power.py) and a
simulation test check that an equal candidate still passes at the stated power.

**McNemar.** The exact McNemar test (a binomial test of the discordant pairs at 1/2; McNemar 1947, exact form in
Agresti, Categorical Data Analysis, 3rd ed., §11.1) is reported for reference. It treats pairs as independent, so
the decision uses the clustered interval, not it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass
class PairedDifference:
    """D = rate(a) − rate(b) with its clustered interval. `lower`/`upper` are the one-sided bounds at `confidence`;
    together they are the two-sided interval at level 2·confidence − 1."""

    estimate: float
    rate_a: float
    rate_b: float
    se: float
    se_cluster: float
    se_paired: float
    df: int
    confidence: float
    lower: float
    upper: float
    n_pairs: int
    n_tasks: int
    a_only: int          # pairs with a_i = 1, b_i = 0
    b_only: int          # pairs with a_i = 0, b_i = 1

    @property
    def interval_level(self) -> float:
        return 2 * self.confidence - 1

    def p_above(self, threshold: float) -> float:
        """One-sided p-value of H0: D ≤ threshold against D > threshold (t on df)."""
        if self.se == 0:
            return 0.0 if self.estimate > threshold else 1.0
        return float(stats.t.sf((self.estimate - threshold) / self.se, self.df))

    def p_below(self, threshold: float) -> float:
        """One-sided p-value of H0: D ≥ threshold against D < threshold."""
        if self.se == 0:
            return 0.0 if self.estimate < threshold else 1.0
        return float(stats.t.cdf((self.estimate - threshold) / self.se, self.df))


def clustered_se(d: np.ndarray, cluster: np.ndarray) -> float:
    """Cluster-robust standard error of mean(d) (CR1: G/(G−1) factor), clusters given as integer ids."""
    n, groups = len(d), np.unique(cluster)
    g = len(groups)
    if n == 0 or g < 2:
        return math.nan
    resid = d - d.mean()
    sums = np.bincount(cluster, weights=resid)
    return float(math.sqrt(g / (g - 1) * float(np.sum(sums ** 2)) / n ** 2))


def agresti_min_se(a_only: int, b_only: int, n: int) -> float:
    """Standard error of a difference of matched proportions after adding 0.5 to each of the four cells."""
    b, c, m = a_only + 0.5, b_only + 0.5, n + 2
    return math.sqrt(max((b + c) / m - ((b - c) / m) ** 2, 0.0) / m)


def paired_difference(a: np.ndarray, b: np.ndarray, cluster: np.ndarray, confidence: float) -> PairedDifference:
    """Mean paired difference of binary outcomes `a` − `b` (same length, 0/1) clustered by task id `cluster`."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    cluster = np.asarray(cluster, dtype=int)
    if not (len(a) == len(b) == len(cluster)):
        raise ValueError("a, b and cluster must have one entry per pair")
    n, g = len(a), len(np.unique(cluster))
    if n == 0 or g < 2:
        raise ValueError(f"a clustered interval needs pairs from at least 2 tasks (got {n} pairs, {g} tasks)")
    d = a - b
    a_only, b_only = int(np.sum(d > 0)), int(np.sum(d < 0))
    se_c, se_p = clustered_se(d, cluster), agresti_min_se(a_only, b_only, n)
    se = max(se_c, se_p)
    q = float(stats.t.ppf(confidence, g - 1))
    est = float(d.mean())
    return PairedDifference(estimate=est, rate_a=float(a.mean()), rate_b=float(b.mean()), se=se, se_cluster=se_c,
                            se_paired=se_p, df=g - 1, confidence=confidence, lower=est - q * se, upper=est + q * se,
                            n_pairs=n, n_tasks=g, a_only=a_only, b_only=b_only)


@dataclass
class McNemar:
    """Exact McNemar test on the discordant pairs: `a_only` candidate-only wins, `b_only` champion-only wins."""

    a_only: int
    b_only: int
    p_two_sided: float      # H0: both kinds of discordant pair equally likely
    p_a_worse: float        # one-sided: evidence that a resolves less often than b


def mcnemar_exact(a_only: int, b_only: int) -> McNemar:
    """Binomial test of `b_only` out of the a_only + b_only discordant pairs at probability 1/2, computed with
    exact integer arithmetic (two-sided p = twice the smaller tail, capped at 1)."""
    n = a_only + b_only
    if n == 0:
        return McNemar(a_only, b_only, 1.0, 1.0)
    total = 2 ** n

    def tail_le(k: int) -> float:            # P(X ≤ k), X ~ Bin(n, 1/2)
        return sum(math.comb(n, j) for j in range(0, k + 1)) / total

    two = min(1.0, 2 * tail_le(min(a_only, b_only)))
    a_worse = tail_le(a_only)                # P(X ≥ b_only) = P(n − X ≤ a_only), symmetric at 1/2
    return McNemar(a_only, b_only, float(two), float(a_worse))
