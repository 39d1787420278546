"""Room to learn: scripted policies on the scoring users, so the learning curve can be read against what the
simulated users reward (`rtrl bench learning --headroom`).

Each policy is the simulator's `ReferencePolicy` (it answers from the task's own demonstration) with error rates:
the oracle makes none; "v0-like" errs as v0 does (its shares of wrong, broken and malformed answers measured on
the same users); "v0 without broken calls" is v0-like with every broken or malformed call made right. If the
users' reactions carry signal, persistence rises and dissatisfied follow-ups fall along that ladder.
"""

from __future__ import annotations

from datetime import timedelta

from codetasks.policy import ErrorRates, ReferencePolicy


def ladder(outcomes: dict[str, int]) -> dict[str, ErrorRates]:
    """The scripted policies from v0's outcomes on the users (the simulator's grades of its answers: correct, wrong,
    broken, question, ...): the oracle; v0-like (v0's shares of wrong and broken answers, broken ones split between
    tool errors and malformed calls); the same without broken calls."""
    total = sum(outcomes.values()) or 1
    wrong, broken = outcomes.get("wrong", 0) / total, outcomes.get("broken", 0) / total
    return {"oracle": ErrorRates(),
            "v0_like": ErrorRates(wrong=wrong, broken=broken / 2, malformed=broken / 2),
            "v0_like_without_broken_calls": ErrorRates(wrong=wrong)}


def score_scripted(sim, spec, hours: float, errors: ErrorRates, seed: int = 0):
    """Unit sums (infra.offline_ab.unit_sums, with the long loop's counts: `score.with_long_loop`) of one scripted
    policy on the population `sim`."""
    from infra.learning.score import with_long_loop
    from infra.offline_ab import unit_sums
    from infra.offline_cycle import rewards_and_outcomes
    from instrumentation.simulator.clock import StepClock
    from instrumentation.simulator.population import Population
    from instrumentation.simulator.user import ListSink

    clock = StepClock(latency_s=sim.deterministic_latency_s)
    sink, policy = ListSink(), ReferencePolicy(seed, errors, policy_version="scripted")
    Population(sim, policy, sink, clock).run(clock.start + timedelta(hours=hours))
    events = sorted([*sink.events, *policy.trajectories(arm="treatment")], key=lambda e: (e.event_time, e.event_id))
    rows, outcomes = rewards_and_outcomes(events, spec)
    return with_long_loop(unit_sums(rows), outcomes)
