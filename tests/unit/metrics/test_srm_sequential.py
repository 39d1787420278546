"""SRM p-values and the mSPRT confidence sequence against hand-computed values; coverage under peeking by
simulation (the confidence sequence keeps its level when looked at after every cycle; a fixed interval does not)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.metrics import sequential
from pipelines.metrics.intervals import Moments, ratio_change
from pipelines.metrics.srm import srm_check


def test_srm_balanced_split_by_hand():
    # expected 1050 each: chi2 = 2 * 50^2 / 1050 = 4.7619; df 1: p = erfc(sqrt(chi2 / 2)) = 0.02910
    r = srm_check({"control": 1000, "treatment": 1100}, {"control": 0.5, "treatment": 0.5})
    assert r.chi2 == pytest.approx(2 * 50 ** 2 / 1050)
    assert r.p_value == pytest.approx(math.erfc(math.sqrt(r.chi2 / 2)), rel=1e-9)
    assert r.p_value == pytest.approx(0.029096, abs=2e-6)
    assert not r.flagged and r.df == 1 and r.expected == {"control": 1050.0, "treatment": 1050.0}


def test_srm_flags_below_threshold():
    # chi2 = 2 * 100^2 / 1100 = 18.18, p = 2.0e-5 < 0.001
    r = srm_check({"control": 1000, "treatment": 1200}, {"control": 0.5, "treatment": 0.5}, threshold=0.001)
    assert r.p_value == pytest.approx(math.erfc(math.sqrt(18.181818 / 2)), rel=1e-5) and r.flagged


def test_srm_uneven_split_by_hand():
    # shares 0.2 / 0.8 of 1000: expected 200 / 800; chi2 = 50^2/200 + 50^2/800 = 15.625
    r = srm_check({"control": 250, "treatment": 750}, {"control": 0.2, "treatment": 0.8})
    assert r.chi2 == pytest.approx(15.625)
    assert r.p_value == pytest.approx(math.erfc(math.sqrt(15.625 / 2)), rel=1e-9) and r.flagged


def test_srm_of_nothing_is_not_flagged():
    r = srm_check({}, {"control": 0.5, "treatment": 0.5})
    assert r.p_value == 1.0 and not r.flagged


def test_halfwidth_by_hand():
    # V = 1e-4, tau = 0.05, alpha = 0.05: sqrt(V (V + tau^2) / tau^2 * (2 ln 20 + ln((V + tau^2) / V)))
    # = sqrt(1.04e-4 * (5.991465 + ln 26 = 3.258097)) = sqrt(1.04e-4 * 9.249561) = sqrt(9.619544e-4) = 0.0310154
    assert sequential.halfwidth(1e-4, 0.05, 0.05) == pytest.approx(0.0310154, abs=2e-7)
    lo, hi = sequential.interval(0.02, 1e-4, 0.05, 0.05)
    assert (lo, hi) == (pytest.approx(0.02 - 0.0310154, abs=2e-7), pytest.approx(0.02 + 0.0310154, abs=2e-7))
    # always wider than the fixed 95% interval (1.96 * 0.01)
    assert sequential.halfwidth(1e-4, 0.05, 0.05) > 1.96 * 0.01


def test_p_value_is_alpha_on_the_boundary():
    h = sequential.halfwidth(4e-4, 0.1, 0.05)
    assert sequential.p_value(h, 4e-4, 0.1) == pytest.approx(0.05, rel=1e-9)
    assert sequential.p_value(0.0, 4e-4, 0.1) == 1.0
    assert sequential.p_value(2 * h, 4e-4, 0.1) < 0.05


def _peeking(true_rel: float, sims: int, looks: int, rng) -> tuple[float, float]:
    """Share of experiments whose interval excludes the truth at ANY look: (mSPRT sequence, fixed 95%)."""
    p_c = 0.30
    p_t = p_c * (1 + true_rel)
    users = 150                                   # new users per arm per cycle, ~5 requests each
    seq_miss = fixed_miss = 0
    for _ in range(sims):
        acc = {arm: np.zeros(6) for arm in ("c", "t")}   # n, sy, sn, syy, snn, syn
        s_miss = f_miss = False
        for _ in range(looks):
            for arm, p in (("c", p_c), ("t", p_t)):
                n = rng.poisson(4, users) + 1
                y = rng.binomial(n, p).astype(float)
                acc[arm] += [users, y.sum(), n.sum(), (y * y).sum(), (n * n).sum(), (y * n).sum()]
            mc, mt = (Moments(int(a[0]), *a[1:]) for a in (acc["c"], acc["t"]))
            ch = ratio_change(mc, mt, 0.05)
            lo, hi = sequential.interval(ch.relative, ch.var_relative, tau=0.05, alpha=0.05)
            s_miss |= not (lo <= true_rel <= hi)
            f_miss |= not (ch.low <= true_rel <= ch.high)
        seq_miss += s_miss
        fixed_miss += f_miss
    return seq_miss / sims, fixed_miss / sims


@pytest.mark.slow
@pytest.mark.parametrize("true_rel", [0.0, 0.05])
def test_sequential_interval_keeps_coverage_under_peeking(true_rel):
    rng = np.random.default_rng(11 + int(true_rel * 100))
    seq_miss, fixed_miss = _peeking(true_rel, sims=500, looks=15, rng=rng)
    # the sequence misses at most alpha (+ 2.5 Monte Carlo standard errors)
    assert seq_miss <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / 500)
    # peeking at a fixed-horizon 95% interval 15 times misses far more often than 5%
    assert fixed_miss > 0.12
