"""Gate statistics on hand-computed fixtures: exact McNemar, the task-clustered interval and its floor, the
token bootstrap, the power helper and the design estimate."""

import math

import numpy as np
import pytest

from evals.gate.bootstrap import median_ratio
from evals.gate.power import estimate_design, ni_power, tasks_needed
from evals.gate.stats import mcnemar_exact, paired_difference

T95 = {3: 2.353363, 9: 1.833113}   # Student t 0.95 quantiles (tables)


@pytest.mark.parametrize("a_only, b_only, two_sided, a_worse", [
    (1, 6, 16 / 128, 8 / 128),        # P(X<=1 | n=7) = (1 + 7) / 2^7
    (6, 1, 16 / 128, 127 / 128),      # candidate better: P(X >= 1 | n=7), "worse" is not shown
    (0, 10, 2 / 1024, 1 / 1024),
    (3, 3, 1.0, 42 / 64),             # P(X<=3 | n=6) = (1+6+15+20)/64
    (0, 0, 1.0, 1.0),
])
def test_exact_mcnemar_matches_binomial_tails_computed_by_hand(a_only, b_only, two_sided, a_worse):
    m = mcnemar_exact(a_only, b_only)
    assert m.p_two_sided == pytest.approx(two_sided, abs=1e-12)
    assert m.p_a_worse == pytest.approx(a_worse, abs=1e-12)


def _pairs(per_task):
    """[(a, b), ...] per task -> arrays a, b, cluster."""
    a = [x for t in per_task for x, _ in t]
    b = [y for t in per_task for _, y in t]
    c = [i for i, t in enumerate(per_task) for _ in t]
    return np.array(a), np.array(b), np.array(c)


def test_clustered_interval_is_the_t_interval_on_task_mean_differences():
    # task mean differences 1, 0.5, 0, 0 -> mean 0.375, sd² = 0.6875 / 3, se = sqrt(sd² / 4) = 0.2393568
    a, b, c = _pairs([[(1, 0), (1, 0)], [(1, 0), (1, 1)], [(0, 0), (1, 1)], [(1, 0), (0, 1)]])
    d = paired_difference(a, b, c, confidence=0.95)
    assert d.estimate == pytest.approx(0.375)
    assert d.se_cluster == pytest.approx(math.sqrt(0.6875 / 3 / 4), abs=1e-9)
    # Agresti-Min: cells +0.5 -> 4.5 candidate-only, 1.5 champion-only of 10: sqrt((0.6 - 0.09) / 10)
    assert d.se_paired == pytest.approx(math.sqrt(0.051), abs=1e-9)
    assert d.se == d.se_cluster and d.df == 3 and (d.a_only, d.b_only) == (4, 1)
    assert d.lower == pytest.approx(0.375 - T95[3] * 0.2393568, abs=1e-5)   # -0.188294
    assert d.upper == pytest.approx(0.375 + T95[3] * 0.2393568, abs=1e-5)   # +0.938294
    assert d.interval_level == pytest.approx(0.90)


def test_interval_never_collapses_when_every_pair_agrees():
    a, b, c = _pairs([[(1, 1), (0, 0)]] * 10)          # 10 tasks, 20 concordant pairs
    d = paired_difference(a, b, c, confidence=0.95)
    assert d.se_cluster == 0.0
    assert d.se == pytest.approx(1 / 22)                  # sqrt((1/22) / 22): one pseudo-discordant pair
    assert (d.lower, d.upper) == pytest.approx((-T95[9] / 22, T95[9] / 22), abs=1e-6)


def test_discordance_concentrated_in_few_tasks_widens_the_interval():
    spread = [[(1, 0)] + [(1, 1)] * 4 for _ in range(20)]                       # one win in every task
    concentrated = [[(1, 0)] * 5 for _ in range(4)] + [[(1, 1)] * 5 for _ in range(16)]   # same 20 wins, 4 tasks
    d_spread = paired_difference(*_pairs(spread), confidence=0.95)
    d_conc = paired_difference(*_pairs(concentrated), confidence=0.95)
    assert d_spread.estimate == d_conc.estimate == pytest.approx(0.2)
    assert d_conc.se_cluster == pytest.approx(math.sqrt(0.2 * 0.8 * 20 / 19 / 20), abs=1e-9)
    assert d_conc.se > 2 * d_spread.se


def test_one_sided_p_values_equal_alpha_at_the_interval_bounds():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 2, 60), rng.integers(0, 2, 60)
    d = paired_difference(a, b, np.repeat(np.arange(15), 4), confidence=0.9)
    assert d.p_above(d.lower) == pytest.approx(0.1, abs=1e-9)
    assert d.p_below(d.upper) == pytest.approx(0.1, abs=1e-9)


def test_an_interval_needs_two_tasks():
    with pytest.raises(ValueError, match="at least 2 tasks"):
        paired_difference(np.ones(4), np.zeros(4), np.zeros(4, dtype=int), 0.95)


def test_token_bootstrap_of_a_uniform_doubling_is_exactly_plus_100_percent():
    champ = np.arange(1, 41, dtype=float) * 10
    m = median_ratio(2 * champ, champ, np.repeat(np.arange(10), 4), 0.95, 500, seed=0, threshold=0.1)
    assert (m.estimate, m.lower, m.upper) == (1.0, 1.0, 1.0)
    assert m.p_above == 0.0
    same = median_ratio(champ, champ, np.repeat(np.arange(10), 4), 0.95, 500, seed=0, threshold=0.1)
    assert (same.estimate, same.lower, same.upper, same.p_above) == (0.0, 0.0, 0.0, 1.0)


def test_token_bootstrap_is_reproducible_for_a_seed():
    rng = np.random.default_rng(0)
    cand, champ = rng.integers(50, 200, 80).astype(float), rng.integers(50, 200, 80).astype(float)
    cl = np.repeat(np.arange(20), 4)
    assert median_ratio(cand, champ, cl, 0.95, 300, 7) == median_ratio(cand, champ, cl, 0.95, 300, 7)


def test_suite_size_matches_connors_normal_approximation_plus_a_t_correction():
    # Connor (1987), one sample per task: n = (z.95 + z.80)² (π − Δ²) / (Δ + m)² = 6.1826 * 0.4 / 0.01 = 247.3
    n = tasks_needed(0.8, 1, margin=0.1, confidence=0.95, discordant_rate=0.4)
    assert 248 <= n <= 252
    assert ni_power(n, 1, 0.1, 0.95, 0.4) >= 0.8 > ni_power(n - 1, 1, 0.1, 0.95, 0.4)


def test_within_task_correlation_costs_tasks_by_the_design_effect():
    base = tasks_needed(0.8, 4, 0.1, 0.95, 0.4, icc=0.0)
    corr = tasks_needed(0.8, 4, 0.1, 0.95, 0.4, icc=0.2)     # design effect 1 + 3 * 0.2 = 1.6
    assert corr / base == pytest.approx(1.6, rel=0.05)
    assert tasks_needed(0.8, 4, 0.05, 0.95, 0.4, true_difference=-0.06) is None   # worse than the margin


def test_design_estimate_reads_discordance_and_intra_task_correlation():
    assert estimate_design(np.array([1, 1, 0, 0.]), np.array([0, 0, 1, 1])) == (0.5, 1.0)   # all between tasks
    assert estimate_design(np.array([1, 0, 1, 0.]), np.array([0, 0, 1, 1])) == (0.5, 0.0)   # all within
