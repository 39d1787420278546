"""The gate on held-out simulated users (evals/gate/users.py): non-inferior to the champion and to the fixed
anchor, guardrails, fail closed; a chain of small losses stops once the anchor margin is spent."""

import pytest

from evals.gate.users import PRIMARY, UsersGateConfig, decide_on_users, pass_probability, power_report

SE = 0.006          # a paired standard error of ~0.6 points: 1.645 x SE ~ 1 point
CFG = UsersGateConfig(margin=0.02, anchor_margin=0.02)


def _vs(persistence: float, broken: float = 0.0, dissatisfied: float = 0.0, se: float = SE) -> dict:
    return {PRIMARY: {"diff": persistence, "se": se}, "broken_tool_call_rate": {"diff": broken, "se": se},
            "dissatisfied_followup_rate": {"diff": dissatisfied, "se": se}}


def test_an_equal_candidate_is_promoted_and_every_check_is_reported():
    v = decide_on_users(_vs(0.0), _vs(0.0), CFG)
    assert v.promote and v.reasons == []
    assert [(c.name, c.against) for c in v.checks] == [
        (PRIMARY, "champion"), (PRIMARY, "anchor"), ("broken_tool_call_rate", "champion"),
        ("dissatisfied_followup_rate", "champion")]
    assert v.checks[0].bound == pytest.approx(-1.6449 * SE, abs=1e-4) and v.checks[0].limit == -0.02


def test_a_candidate_shown_worse_than_its_champion_by_more_than_the_margin_is_kept_out():
    v = decide_on_users(_vs(-0.04), _vs(0.01), CFG)
    assert not v.promote and v.reasons == ["inferior"]
    v = decide_on_users(_vs(-0.015), _vs(0.01), CFG)      # within the margin, but the bound reaches past it
    assert v.reasons == ["inconclusive"]


def test_a_guardrail_blocks_only_when_shown_worse_by_more_than_its_margin():
    assert decide_on_users(_vs(0.01, broken=0.025), None, CFG).promote        # +2.5 points, bound +1.5: inside 2
    v = decide_on_users(_vs(0.01, broken=0.04, dissatisfied=0.035), None, CFG)
    assert v.reasons == ["guardrail:broken_tool_call_rate", "guardrail:dissatisfied_followup_rate"]


def test_no_data_keeps_the_champion():
    v = decide_on_users({PRIMARY: {"diff": None, "se": None}}, _vs(0.0), CFG)
    assert not v.promote and "champion:no_data:edit_persistence_rate" in v.reasons
    assert "champion:no_data:broken_tool_call_rate" in v.reasons


def test_a_chain_of_candidates_each_a_little_worse_is_refused_once_the_anchor_margin_is_spent():
    """Biocreep on users: each candidate is 0.8 points below its parent, which the parent test passes every time
    (bound -1.8 > -2). Against the anchor the margin is spent once: the lineage stops before it is shown more than
    anchor_margin below v0, and so does every later (worse) candidate."""
    cfg = UsersGateConfig(margin=0.02, anchor_margin=0.02, guardrails={})
    step = -0.008
    parent_only, anchored = [], []
    for j in range(1, 9):
        vs_parent, vs_anchor = _vs(step), _vs(j * step)
        parent_only.append(decide_on_users(vs_parent, None, cfg).promote)
        v = decide_on_users(vs_parent, vs_anchor, cfg)
        anchored.append(v.promote)
        if not v.promote:
            assert v.reasons in (["anchor:inconclusive"], ["anchor:inferior"])
    assert all(parent_only)
    assert anchored == [True] + [False] * 7, anchored     # -0.8 passes (bound -1.8); -1.6 does not (-2.6)


def test_the_power_report_gives_the_pass_chance_of_equal_and_worse_candidates():
    p = power_report(0.014, UsersGateConfig(margin=0.03))
    assert p["equal"] == pytest.approx(0.691, abs=1e-3)                 # Phi(3/1.4 - 1.645)
    assert p["worse_by_margin"] == pytest.approx(0.05, abs=1e-9)         # by construction
    assert p["worse_by_twice_the_margin"] < 1e-3
    assert pass_probability(0.0, 0.03, -0.01) == 1.0 and pass_probability(0.0, 0.03, -0.05) == 0.0
    assert power_report(None) is None
