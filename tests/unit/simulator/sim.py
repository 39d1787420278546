"""Helpers: run a simulated population against the reference policy on the deterministic clock, and build the
trajectories serving would have logged for it (the reference mode has no serving)."""

from __future__ import annotations

from datetime import timedelta

from instrumentation.simulator.clock import StepClock
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import ErrorRates, ReferencePolicy
from instrumentation.simulator.population import Population
from instrumentation.simulator.user import ListSink
from schemas.events import Trajectory


def simulate(*, seed: int = 0, users: int = 4, hours: float = 3.0, errors: ErrorRates | None = None,
             sink=None, **overrides) -> tuple[Population, ListSink, ReferencePolicy]:
    cfg = SimulatorConfig(seed=seed, users=users, **{"privacy_rate": 0.0, **overrides})
    clock = StepClock(latency_s=cfg.deterministic_latency_s)
    policy = ReferencePolicy(seed, errors)
    sink = sink if sink is not None else ListSink()
    pop = Population(cfg, policy, sink, clock)
    pop.run(clock.start + timedelta(hours=hours))
    return pop, sink, policy


def trajectories(policy: ReferencePolicy) -> list[Trajectory]:
    """One trajectory per request the reference policy answered, with the ids and time the user sent."""
    return policy.trajectories(arm="control", client_version="serving-test")
