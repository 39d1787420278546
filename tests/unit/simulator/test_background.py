"""Background tasks (instrumentation/simulator/background.py): several steps under one task id in a session of their
own, retried after a broken call, judged hours later with a task_outcome in the user's session of that time; a
better policy gets more of them accepted; the long-loop join gives every step's request its task's outcome."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from codetasks.policy import ErrorRates
from instrumentation.simulator.config import SimulatorConfig
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.outcomes import assemble_outcomes
from pipelines.rewards.spec import RewardSpec
from tests.unit.simulator.sim import simulate, trajectories

BG = dict(background_rate=0.5, background_steps=(2, 3), outcome_delay_s=(3600.0, 7200.0))


def _outcomes(sink):
    return [e for e in sink.events if e.event_type == "task_outcome"]


def test_a_background_task_runs_its_steps_under_one_task_id_and_is_judged_hours_later_in_a_later_session():
    pop, sink, policy = simulate(users=4, hours=3, **BG)
    outcomes = _outcomes(sink)
    assert outcomes and pop.stats.c["background_tasks"] >= len(outcomes)
    by_task = defaultdict(list)
    for s in policy.served:
        if s.metadata.get("task_id"):
            by_task[s.metadata["task_id"]].append(s)
    for o in outcomes:
        steps = by_task[o.task_id]
        assert 2 <= len({s.task.task_id for s in steps}) <= 3               # one request or more per step
        assert len({s.metadata["session_id"] for s in steps}) == 1          # the task's own session
        assert o.session_id != steps[0].metadata["session_id"]              # judged from the user's session
        last = max(s.metadata["event_time"] for s in steps)
        assert 3600 <= (o.event_time - _time(last)).total_seconds() <= 7200 + 10
        assert o.outcome in ("accepted", "merged", "reverted", "abandoned")
        assert o.rating is None or 1 <= o.rating <= 5
    # a background request is not reviewed: no suggestion, apply or follow-up names it
    ids = {s.request_id for steps in by_task.values() for s in steps}
    reviewed = {getattr(e, "request_id", None) or getattr(e, "previous_request_id", None) for e in sink.events
                if e.event_type in ("suggestion_shown", "edit_applied", "edit_rejected", "followup_message")}
    assert not ids & reviewed
    assert SimulatorConfig().background_rate == 0.0                         # the default population has none


def _time(iso):
    from datetime import datetime

    return datetime.fromisoformat(iso)


def test_a_broken_step_is_retried_with_the_error_fed_back():
    _, _, policy = simulate(users=4, hours=3, errors=ErrorRates(broken=0.5), **BG)
    retried = [s for s in policy.served if s.metadata.get("task_id") and len(s.messages) > 2]
    assert retried and all("did not go through" in s.messages[-1]["content"] for s in retried)


def test_a_policy_that_errs_gets_fewer_background_tasks_accepted():
    def accepted(errors):
        _, sink, _ = simulate(users=8, hours=4, errors=errors, **BG)
        kinds = Counter(o.outcome for o in _outcomes(sink))
        return (kinds["accepted"] + kinds["merged"]) / sum(kinds.values())

    assert accepted(None) > accepted(ErrorRates(wrong=0.5)) + 0.3


def test_the_long_loop_join_gives_each_step_request_its_tasks_outcome():
    _, sink, policy = simulate(users=4, hours=3, **BG)
    events = sink.events + trajectories(policy)
    rows, counts = assemble_outcomes(frames_from_events(events), RewardSpec(), None)
    outcome_of = {o.task_id: o.outcome for o in _outcomes(sink)}
    known = rows.filter(rows["outcome_label"] == "known")
    assert known.height and set(known["task_id"]) == set(outcome_of)
    assert all(outcome_of[t] == o for t, o in zip(known["task_id"], known["outcome"]))
    assert (known["chain_requests"] >= 2).all()                         # every step's request, retries too
    assert counts["outcome_unknown"] == rows.height - known.height == 0  # the run drains: every task is judged
