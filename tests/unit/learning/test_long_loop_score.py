"""The learning loop's long loop: with background tasks on, a drained offline run judges
every task it started, and each checkpoint's acceptance rate is scored per user beside the reward-row metrics."""

from datetime import timedelta

import polars as pl
from codetasks.policy import ErrorRates, ReferencePolicy
from infra.learning.headroom import score_scripted
from infra.learning.score import ACCEPTED, JUDGED, LONG_LOOP, differences, summary, with_long_loop
from infra.offline_ab import paired_units_difference
from infra.offline_cycle import rewards_and_outcomes
from instrumentation.simulator.clock import StepClock
from instrumentation.simulator.config import SimulatorConfig
from instrumentation.simulator.population import Population
from instrumentation.simulator.user import ListSink
from pipelines.metrics.long_loop import task_units
from pipelines.rewards.spec import RewardSpec

SIM = SimulatorConfig(users=24, seed=42, background_rate=0.5)


def test_a_drained_run_judges_every_background_task_it_started():
    clock = StepClock(latency_s=SIM.deterministic_latency_s)
    sink, policy = ListSink(), ReferencePolicy(0, ErrorRates(wrong=0.3, broken=0.2), policy_version="scripted")
    population = Population(SIM, policy, sink, clock)
    population.run(clock.start + timedelta(hours=1))
    events = sorted([*sink.events, *policy.trajectories(arm="treatment")], key=lambda e: (e.event_time, e.event_id))
    rows, outcomes = rewards_and_outcomes(events, RewardSpec())
    tasks = task_units(outcomes)
    started = population.stats.c["background_tasks"]
    assert started > 20
    assert tasks.height == started and tasks["known"].all()
    assert rows.filter(pl.col("task_id").is_not_null())["task_id"].n_unique() == started


def test_the_users_accept_more_background_tasks_from_a_policy_that_errs_less():
    v0_like = score_scripted(SIM, RewardSpec(), 1.0, ErrorRates(wrong=0.3, broken=0.2))
    oracle = score_scripted(SIM, RewardSpec(), 1.0, ErrorRates())
    assert summary(v0_like)[LONG_LOOP] + 0.3 < summary(oracle)[LONG_LOOP]
    assert summary(oracle)["background_tasks"] == int(oracle[JUDGED].sum()) > 20
    change = differences(v0_like, oracle, 0.05)[LONG_LOOP]
    assert change["ci_low"] > 0.3 and change["paired_users"] > 20


def _outcome(user: str, task: str, outcome: str | None) -> dict:
    return {"org_id": "o", "workspace_id": f"w-{user}", "task_id": task, "arm": "treatment", "user_id": user,
            "policy_version": "1", "request_id": f"{task}-r", "request_time": 0,
            "outcome_label": "known" if outcome else "unknown", "outcome": outcome}


def test_the_long_loop_counts_join_the_units_without_changing_any_other_sum():
    units = pl.DataFrame({"user_id": ["a", "b"], "arm": ["treatment"] * 2, "n": [4, 2],
                          "edit_persistence_rate_num": [2.0, 1.0], "edit_persistence_rate_den": [3.0, 2.0]})
    outcomes = pl.DataFrame([_outcome("a", "t1", "merged"), _outcome("a", "t2", "reverted"),
                             _outcome("b", "t3", "accepted"), _outcome("b", "t4", None)])
    both = with_long_loop(units, outcomes)
    assert both.group_by("user_id").agg(pl.col("n", ACCEPTED, JUDGED).sum()).sort("user_id").rows() == [
        ("a", 4, 1.0, 2.0), ("b", 2, 1.0, 1.0)]                # b's unknown task is not judged
    same = paired_units_difference(units, both, "edit_persistence_rate", 0.05)
    assert same["diff"] == 0 and same["se"] == 0
    assert with_long_loop(units, outcomes.clear()) is units
