"""Helpers: run a simulated population against the reference policy on the deterministic clock, and build the
trajectories serving would have logged for it (the reference mode has no serving)."""

from __future__ import annotations

import uuid
from datetime import timedelta

from instrumentation.simulator.clock import StepClock
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import ErrorRates, ReferencePolicy
from instrumentation.simulator.population import Population
from instrumentation.simulator.user import ListSink
from schemas.events import Trajectory

NS = uuid.UUID("9d0f1a52-6a1e-4a8f-bb1c-2f3e4d5c6b7a")


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
    out = []
    for s in policy.served:
        m = s.metadata
        n = max(1, len(s.text) // 4)
        private = bool(m["privacy_mode"])
        out.append(Trajectory(
            event_id=str(uuid.uuid5(NS, s.request_id)), event_time=m["event_time"], user_id=s.user,
            org_id=m["org_id"], workspace_id=m["workspace_id"], session_id=m["session_id"], privacy_mode=private,
            client_version="serving-test", request_id=s.request_id, policy_version="ref-1", arm="control",
            prompt_token_ids=[] if private else [1] * 8, completion_token_ids=[] if private else [2] * n,
            behaviour_logprobs=[] if private else [-0.5] * n, tool_calls=s.parsed.records, latency_ms=20.0,
            prompt_tokens=8, completion_tokens=n, response_kind=s.parsed.kind))
    return out
