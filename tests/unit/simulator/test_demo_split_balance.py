"""`rtrl demo` runs the same seeded population with the same sticky A/B split every time: the same users are in
the treatment arm, with the same workspaces and the same seeded reactions to each task. So whatever luck the split
froze in is in every demo's A/B. These tests measure that frozen part: both arms served by one policy (a v0-like
reference policy: its errors drawn anew for each policy seed; after a complaint it always breaks its edit, as the
default v0 does), the demo's users and pace, the demo's arms, and the A/B's window of simulated time. Over the
policy seeds, the mean difference between the arms is the split's own bias; it must be small against the spread
of one run's difference (what a demo's interval describes). The second test shows that the same measurement
does find a real difference of the size the demo reports."""

from __future__ import annotations

import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from functools import partial

import pytest

from infra.config import load_config, overlay_overrides, render_overrides
from infra.orchestrator.demo import DEMO_CONFIG, pace_settings
from instrumentation.simulator.clock import StepClock
from codetasks.policy import ErrorRates, ReferencePolicy, flawed_edit
from instrumentation.simulator.population import Population
from schemas.tool_protocol import parse_response
from serving.router import Router

pytestmark = [pytest.mark.slow, pytest.mark.full]   # two demo populations measured: minutes

V0_LIKE = ErrorRates(wrong=0.12, broken=0.30, malformed=0.05, needless=0.02, guess=0.6)
SEEDS = range(12)
WINDOW_H = (2.85, 7.9)    # the A/B's requests: after the first promotion (~170 s x 60) until 45 s before 520 s


class V0Like(ReferencePolicy):
    """The reference policy, except that a turn after a complaint always breaks its edit (the default v0 does)."""

    def respond(self, request):
        reply = super().respond(request)
        msgs = request.messages
        if len(msgs) > 2 and msgs[-1]["content"] != request.task.clarification:
            reply.text = flawed_edit(request.task, "broken")
            reply.parsed = parse_response(reply.text)
        return reply


class ByArm:
    """One policy per arm of the demo's router."""

    def __init__(self, router: Router, policies: dict[str, ReferencePolicy]):
        self.router, self.policies = router, policies

    def respond(self, request):
        return self.policies[self.router.assign(request.user)].respond(request)


class Nowhere:
    def emit(self, event) -> bool:
        return True


def arm_differences(policy_seed: int, treatment_errors: ErrorRates = V0_LIKE) -> tuple[float, float]:
    """(edit persistence, dissatisfied follow-ups) of treatment − control in points, in the A/B's window."""
    pace = render_overrides(pace_settings(load_config(None, [])))
    cfg = load_config(None, [*overlay_overrides(DEMO_CONFIG), *pace])
    sim = cfg.simulator.model_copy(update={"users": cfg.demo.users})
    router = Router(cfg.serving.experiment, cfg.serving.arms)
    policy = ByArm(router, {"control": V0Like(policy_seed, V0_LIKE),
                            "treatment": V0Like(policy_seed, treatment_errors)})
    clock = StepClock(latency_s=sim.deterministic_latency_s)
    population = Population(sim, policy, Nowhere(), clock)
    population.run(clock.start + timedelta(hours=WINDOW_H[1]))
    private = {u.user_id for u in population.users if u.privacy}     # never in a reward row
    lo, hi = (clock.start + timedelta(hours=h) for h in WINDOW_H)
    n = {arm: [0, 0, 0, 0] for arm in ("control", "treatment")}      # requests, dissatisfied, edits shown, kept
    for t in population.stats.ledger:
        if lo <= t.time < hi and t.outcome != "error" and t.user_id not in private:
            c = n[router.assign(t.user_id)]
            c[0] += 1
            c[1] += t.followup == "dissatisfied"
            if t.applied is not None:
                c[2] += 1
                c[3] += bool(t.applied and not t.reverted)
    (rc, dc, ec, kc), (rt, dt, et, kt) = n["control"], n["treatment"]
    assert min(rc, rt, ec, et) > 500, n
    return 100 * (kt / et - kc / ec), 100 * (dt / rt - dc / rc)


def over_seeds(treatment_errors: ErrorRates = V0_LIKE) -> list[tuple[float, float]]:
    """`arm_differences` for every policy seed, the seeds' populations run side by side on the machine's cores
    (spawned: a fork of a test process whose threads hold locks could hang)."""
    workers = max(1, min(len(SEEDS), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(partial(arm_differences, treatment_errors=treatment_errors), SEEDS))


def _summary(diffs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Per metric: (mean over seeds, standard error of that mean)."""
    out = []
    for i in range(2):
        xs = [d[i] for d in diffs]
        out.append((statistics.mean(xs), statistics.stdev(xs) / len(xs) ** 0.5))
    return out


def test_the_demos_fixed_split_of_its_seeded_population_favours_neither_arm():
    diffs = over_seeds()
    for (mean, se), spread in zip(_summary(diffs), (statistics.stdev(d[i] for d in diffs) for i in range(2))):
        assert spread > 1.0                      # one run's difference does vary with the policy's draws ...
        assert abs(mean) < max(2.5 * se, 1.0)    # ... but not around a bias the split froze in


def test_the_same_measurement_finds_a_treatment_that_errs_less():
    better = ErrorRates(wrong=0.09, broken=0.24, malformed=0.05, needless=0.02, guess=0.6)
    (p_mean, p_se), (d_mean, d_se) = _summary(over_seeds(better))
    assert p_mean > 2.5 * p_se and d_mean < -2.5 * d_se
