"""The simulated users through the official `openai` client against serving's own request/response contract
(`serving.protocol`, no vLLM: the reference policy writes the text): serving accepts what the users send, the users
read back what serving answers, and serving's trajectories join the users' events in the reward job."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from statistics import mean

import httpx
import pytest

from instrumentation.simulator.clock import StepClock
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import ErrorRates, OpenAIPolicy, PolicyRequest, ReferencePolicy
from instrumentation.simulator.population import Population
from instrumentation.simulator.user import CLIENT_VERSION, ListSink
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.spec import RewardSpec
from schemas.tool_protocol import parse_response

protocol = pytest.importorskip("serving.protocol")


class ServingContract:
    """An OpenAI-compatible endpoint built from serving.protocol; the reference policy writes each answer."""

    def __init__(self, seed: int, errors: ErrorRates):
        self.reference = ReferencePolicy(seed, errors, policy_version="3")
        self.trajectories = []
        self.local = threading.local()

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [{"id": "rtrl-policy", "object": "model",
                                                                         "created": 0, "owned_by": "rtrl"}]})
        body = json.loads(request.content)
        try:
            # the deterministic clock's event times are weeks back: the run's own simulated time, not client skew
            req = protocol.parse_request(body, default_max_tokens=192, max_model_len=4096,
                                         time_bounds=protocol.TimeBounds(300, 3650 * 86400))
        except protocol.RequestError as e:
            return httpx.Response(e.status, json=e.body())
        task_request = self.local.request
        text = self.reference.respond(PolicyRequest(req.messages, req.user_id, {}, task_request.task)).text
        n = max(1, len(text) // 4)
        gen = protocol.Generation(token_ids=list(range(n)), logprobs=[-0.25] * n, tokens=["x"] * n, text=text,
                                  finish_reason="stop")
        served = protocol.Served(request=req, arm="treatment", policy_version="3", model="rtrl-policy/v3",
                                 prompt_token_ids=[1] * 16, generations=[gen], parsed=[parse_response(text)],
                                 sampling=protocol.Sampling(1.0), latency_ms=15.0)
        self.trajectories.extend(protocol.build_trajectories(served))
        return httpx.Response(200, json=protocol.build_response(served))


class Client:
    """The real client path (OpenAIPolicy); the task rides beside the call only so the fake engine can answer."""

    def __init__(self, serving: ServingContract):
        self.serving = serving
        self.policy = OpenAIPolicy("http://serving.test/v1", http_client=httpx.Client(
            transport=httpx.MockTransport(serving.handle)))
        self.policy.check()

    def respond(self, request: PolicyRequest):
        self.serving.local.request = request
        return self.policy.respond(request)


@pytest.fixture(scope="module")
def run():
    serving = ServingContract(0, ErrorRates(wrong=0.25, broken=0.05, malformed=0.05, needless=0.1))
    cfg = SimulatorConfig(users=5, privacy_rate=0.15)
    clock = StepClock()
    sink = ListSink()
    pop = Population(cfg, Client(serving), sink, clock)
    pop.run(clock.start + timedelta(hours=5))
    return pop, sink, serving


def test_serving_logs_the_ids_and_times_the_users_sent(run):
    pop, sink, serving = run
    traj = {t.request_id: t for t in serving.trajectories}
    assert len(traj) == pop.stats.c["requests"] > 100 and not pop.summary()["failures"]
    for e in sink.events:
        rid = getattr(e, "request_id", None) or getattr(e, "previous_request_id", None)
        if rid is None:  # snapshots belong to files, not requests
            continue
        t = traj[rid]
        assert (t.user_id, t.org_id, t.workspace_id, t.session_id, t.privacy_mode) == \
            (e.user_id, e.org_id, e.workspace_id, e.session_id, e.privacy_mode)
        assert t.event_time <= e.event_time
        assert t.client_version == CLIENT_VERSION
    assert {t.privacy_mode for t in traj.values()} == {True, False}
    turns = {t.request_id: t for t in pop.stats.ledger}
    assert all(turns[r].arm == "treatment" and turns[r].policy_version == "3" for r in traj)
    assert all(turns[r].outcome == ("question" if t.response_kind.value == "question" else turns[r].outcome)
               for r, t in traj.items())
    broken = [r for r, t in traj.items() if any(c.status.value != "ok" for c in t.tool_calls)]
    assert broken and all(turns[r].outcome == "broken" for r in broken)


def test_the_reward_job_ranks_right_edits_above_wrong_ones(run):
    pop, sink, serving = run
    spec = RewardSpec()
    out = assemble_rewards(frames_from_events(sink.events + serving.trajectories), spec,
                           get_classifier(spec.classifier), fire_at=None)
    rows = {r["request_id"]: r["reward"] for r in out.rows.iter_rows(named=True)}
    by = {}
    for t in pop.stats.ledger:
        if t.request_id in rows:
            by.setdefault("needless" if t.needless_question else t.outcome, []).append(rows[t.request_id])
    assert out.counts["unknown_labels"] == 0
    assert mean(by["correct"]) > 0.5 > -0.5 > mean(by["wrong"]) and mean(by["broken"]) < -1.0
    assert mean(by["question"]) > mean(by["needless"])
