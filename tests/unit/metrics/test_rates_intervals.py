"""Rates and delta-method intervals against values computed by hand (users as the unit)."""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import polars as pl
import pytest

from pipelines.metrics.intervals import Moments, moments, moments_of, ratio_change, relative_change
from pipelines.metrics.rates import rates, unit_stats
from tests.unit.metrics.helpers import frame, ratio_rows, row

# control users (Y, N): (1, 2), (2, 2), (0, 1)  -> r_C = 3/5; treatment (2, 2), (1, 2), (2, 3) -> r_T = 5/7
CONTROL = [(1, 2), (2, 2), (0, 1)]
TREATMENT = [(2, 2), (1, 2), (2, 3)]
# by hand (module docstring of intervals.py): Var(r) = (s_YY - 2 r s_YN + r^2 s_NN) / (n Nbar^2)
# control: s_YY = 1, s_NN = 1/3, s_YN = 1/2, Nbar = 5/3 -> (1 - 3/5 + 9/25 * 1/3) / (3 * 25/9) = 0.0624
VAR_C = (F(1) - 2 * F(3, 5) * F(1, 2) + F(9, 25) * F(1, 3)) / (3 * F(25, 9))
# treatment: s_YY = 1/3, s_NN = 1/3, s_YN = 1/6, Nbar = 7/3 -> (39/147) / (49/3) = 117/7203
VAR_T = (F(1, 3) - 2 * F(5, 7) * F(1, 6) + F(25, 49) * F(1, 3)) / (3 * F(49, 9))


def _units():
    rows = ratio_rows("control", CONTROL, "c") + ratio_rows("treatment", TREATMENT, "t")
    return unit_stats(frame(rows).lazy()).collect()


def test_hand_values_are_what_the_docstring_says():
    assert float(VAR_C) == pytest.approx(0.0624, abs=1e-15)
    assert VAR_T == F(117, 7203)


def test_unit_stats_and_rates():
    units = _units()
    assert units.height == 6
    r = rates(units, ["arm"])
    assert r.filter(pl.col("arm") == "control")["dissatisfied_followup_rate"][0] == pytest.approx(3 / 5)
    assert r.filter(pl.col("arm") == "treatment")["dissatisfied_followup_rate"][0] == pytest.approx(5 / 7)
    assert r["n"].to_list() == [5, 7] and r["users"].to_list() == [3, 3]


def test_delta_method_variance_and_interval_by_hand():
    mom = moments(_units(), "dissatisfied_followup_rate", ["arm"])
    c, t = moments_of(mom, arm="control"), moments_of(mom, arm="treatment")
    assert (c.n, c.sy, c.sn, c.syy, c.snn, c.syn) == (3, 3, 5, 5, 9, 6)
    assert c.ratio == pytest.approx(0.6) and c.variance == pytest.approx(float(VAR_C), rel=1e-12)
    assert t.variance == pytest.approx(float(VAR_T), rel=1e-12)
    ch = ratio_change(c, t, alpha=0.05)
    rel = F(5, 7) / F(3, 5) - 1                                   # 4/21
    var_rel = VAR_T / F(3, 5) ** 2 + F(5, 7) ** 2 * VAR_C / F(3, 5) ** 4
    assert ch.relative == pytest.approx(float(rel)) and ch.var_relative == pytest.approx(float(var_rel), rel=1e-12)
    half = 1.959963984540054 * math.sqrt(float(var_rel))
    assert (ch.low, ch.high) == (pytest.approx(float(rel) - half), pytest.approx(float(rel) + half))
    assert ch.absolute == pytest.approx(5 / 7 - 3 / 5) and ch.var_absolute == pytest.approx(float(VAR_C + VAR_T))
    # two-sided normal p-value of the relative change
    z = float(rel) / math.sqrt(float(var_rel))
    assert ch.p_value == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-9)


def test_edit_persistence_excludes_unknown_labels_and_counts_them():
    rows = [row("a", persistence=1.0), row("a", persistence=0.5), row("a", persistence=None, label="unknown"),
            row("b", persistence=0.0, label="known", kind="edit"),               # a rejected edit persists 0
            row("b", persistence=None, label="not_applicable", kind="answer"),
            row("b", persistence=None, label="unknown")]
    units = unit_stats(frame(rows).lazy()).collect()
    r = rates(units, ["arm"]).row(0, named=True)
    assert r["edit_persistence_rate"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert r["shown_edit_persistence_rate"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert r["unknown_label_share"] == pytest.approx(2 / 5)     # 2 unknown of 5 labelled (known + unknown)
    assert r["edit_rate"] == pytest.approx(5 / 6) and r["n"] == 6


def test_a_broken_edit_attempt_persists_zero_in_edit_persistence_but_not_in_shown_edit_persistence():
    rows = [row("a", persistence=1.0),                                             # a kept edit
            row("a", persistence=0.0),                                             # a rejected one
            row("a", persistence=None, label="not_applicable", broken=1),         # edit_file whose old text is gone
            row("b", persistence=None, label="not_applicable", kind="answer", broken=2),   # a malformed call
            row("b", persistence=None, label="unknown", broken=1),                # applied, still immature: left out
            row("b", persistence=None, label="not_applicable", kind="question"),  # no attempt: left out
            row("b", persistence=None, label="not_applicable", kind="answer")]
    r = rates(unit_stats(frame(rows).lazy()).collect(), ["arm"]).row(0, named=True)
    assert r["edit_persistence_rate"] == pytest.approx(1.0 / 4)        # kept, rejected and two broken attempts
    assert r["shown_edit_persistence_rate"] == pytest.approx(1.0 / 2)  # the broken ones escape it


def test_a_needless_question_complaint_is_a_dissatisfied_follow_up():
    rows = [row("a", kind="question", followup="satisfied", needless=True),   # "why are you asking? just do it"
            row("a", followup="dissatisfied"), row("a", followup="satisfied"), row("a")]
    r = rates(unit_stats(frame(rows).lazy()).collect(), ["arm"]).row(0, named=True)
    assert r["dissatisfied_followup_rate"] == pytest.approx(2 / 4)


def test_other_rates_by_hand():
    rows = [row("a", kind="question", broken=2, tokens=10, reward=1.0),
            row("a", kind="edit", broken=0, tokens=30, reward=-1.0, followup="dissatisfied"),
            row("b", kind="answer", broken=1, tokens=20, reward=0.5, followup="satisfied"),
            row("b", kind="edit", tokens=40, reward=0.0)]
    r = rates(unit_stats(frame(rows).lazy()).collect(), ["arm"]).row(0, named=True)
    assert r["clarification_rate"] == pytest.approx(1 / 4)
    assert r["broken_tool_call_rate"] == pytest.approx(2 / 4)    # responses with >= 1 broken call
    assert r["tokens_per_response"] == pytest.approx(25.0)
    assert r["reward_mean"] == pytest.approx(0.125)
    assert r["dissatisfied_followup_rate"] == pytest.approx(1 / 4)


def test_a_user_split_over_two_checkpoints_is_one_unit():
    rows = [row("a", version="2"), row("a", version="3"), row("b", version="3")]
    units = unit_stats(frame(rows).lazy()).collect()
    assert units.height == 3                                   # (version, user) groups
    m = moments_of(moments(units, "edit_rate", ["arm"]), arm="control")
    assert m.n == 2 and m.snn == 2 ** 2 + 1 ** 2               # user a: N = 2 (both versions summed)


def test_delta_interval_covers_clustered_truth():
    """Users with their own rates (strong clustering; true rates 0.30 and 0.33, so the change is +10%): the
    user-level interval covers it about 95% of the time, where treating requests as independent would not."""
    rng = np.random.default_rng(7)
    covered, naive_covered, sims = 0, 0, 400
    for _ in range(sims):
        ms = []
        for base in (0.3, 0.33):
            n_req = rng.poisson(20, 300) + 1
            p_user = rng.beta(base * 4, (1 - base) * 4, 300)    # mean exactly `base`, users differ a lot
            y = rng.binomial(n_req, p_user).astype(float)
            ms.append(Moments(300, y.sum(), n_req.sum(), (y * y).sum(), (n_req ** 2).sum(), (y * n_req).sum()))
        ch = ratio_change(ms[0], ms[1], 0.05)
        covered += ch.low <= 0.1 <= ch.high
        rc, rt = ms[0].ratio, ms[1].ratio
        naive = relative_change(rc, rc * (1 - rc) / ms[0].sn, rt, rt * (1 - rt) / ms[1].sn, 0.05)
        naive_covered += naive.low <= 0.1 <= naive.high
    assert abs(covered / sims - 0.95) < 0.035
    assert naive_covered / sims < 0.85
