"""Relative change of the median completion tokens (candidate vs champion) with a task-level paired bootstrap.

A median has no simple standard error, and the K samples of a task are correlated, so the interval comes from
resampling whole tasks with replacement (every pair of a drawn task comes along, both arms together: the pairing
and the within-task correlation survive). This is the cluster bootstrap of Davison & Hinkley (1997), *Bootstrap
Methods and their Application*, §3.8 (resampling the first stage), with percentile bounds (Efron & Tibshirani 1993,
*An Introduction to the Bootstrap*, ch. 13). The statistic is median(candidate) / median(champion) − 1, with the
champion's median floored at 1 token so an empty-answer champion does not divide by zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class MedianRatio:
    candidate_median: float
    champion_median: float
    estimate: float          # relative change, 0.10 = +10%
    lower: float             # one-sided bounds at `confidence` (two-sided interval at 2·confidence − 1)
    upper: float
    confidence: float
    resamples: int
    threshold: float
    p_above: float           # bootstrap p-value of H0: change ≤ threshold (share of resamples at or below it)


def relative_change(cand: float, champ: float) -> float:
    return cand / max(champ, 1.0) - 1.0


def median_ratio(cand: np.ndarray, champ: np.ndarray, cluster: np.ndarray, confidence: float, resamples: int,
                 seed: int, threshold: float = 0.0) -> MedianRatio:
    """The relative median change, its percentile bounds and the p-value of "change ≤ `threshold`"."""
    cand, champ = np.asarray(cand, dtype=float), np.asarray(champ, dtype=float)
    cluster = np.asarray(cluster, dtype=int)
    g = int(cluster.max()) + 1 if len(cluster) else 0
    rng = np.random.default_rng(seed)
    draws = np.empty(resamples)
    for r in range(resamples):
        weights = np.bincount(rng.integers(0, g, size=g), minlength=g)[cluster]   # copies of each pair
        draws[r] = relative_change(float(np.median(np.repeat(cand, weights))),
                                   float(np.median(np.repeat(champ, weights))))
    alpha = 1 - confidence
    lo, hi = np.quantile(draws, [alpha, 1 - alpha])
    mc, mh = float(np.median(cand)), float(np.median(champ))
    return MedianRatio(mc, mh, relative_change(mc, mh), float(lo), float(hi), confidence, resamples, threshold,
                       float(np.mean(draws <= threshold)))
