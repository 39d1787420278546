"""Room to learn: scripted policies on the same simulated users. The users reward a better
policy: fewer broken calls and fewer wrong edits each raise edit persistence and lower dissatisfied follow-ups,
up to the oracle."""

import pytest

from codetasks.policy import ErrorRates
from infra.learning.headroom import ladder, score_scripted
from infra.learning.score import summary
from instrumentation.simulator.config import SimulatorConfig
from pipelines.rewards.spec import RewardSpec


def test_the_ladder_takes_v0s_shares_of_wrong_and_broken_answers():
    rungs = ladder({"correct": 50, "wrong": 20, "broken": 30, "question": 0})
    assert rungs["oracle"] == ErrorRates()
    assert rungs["v0_like"] == ErrorRates(wrong=0.2, broken=0.15, malformed=0.15)
    assert rungs["v0_like_without_broken_calls"] == ErrorRates(wrong=0.2)


def test_the_users_reward_fewer_broken_calls_and_fewer_wrong_edits():
    sim = SimulatorConfig(users=48, seed=31)
    rates = {name: summary(score_scripted(sim, RewardSpec(), 1.0, errors)) for name, errors in
             ladder({"correct": 40, "wrong": 20, "broken": 40}).items()}
    v0, fixed, oracle = rates["v0_like"], rates["v0_like_without_broken_calls"], rates["oracle"]
    assert v0["broken_tool_call_rate"] == pytest.approx(0.4, abs=0.08) and fixed["broken_tool_call_rate"] == 0
    assert v0["edit_persistence_rate"] + 0.1 < fixed["edit_persistence_rate"] < oracle["edit_persistence_rate"] - 0.1
    assert v0["dissatisfied_followup_rate"] > fixed["dissatisfied_followup_rate"] > oracle["dissatisfied_followup_rate"]
    assert oracle["edit_persistence_rate"] > 0.75            # what a right edit earns: applied 0.9, kept 0.95
