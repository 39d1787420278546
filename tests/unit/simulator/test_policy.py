"""The policy interface: the OpenAI client path (against a mock endpoint) and the reference policy."""

from __future__ import annotations

import itertools
import json
import random
import threading
from datetime import datetime, timedelta

import httpx
import pytest

from instrumentation.simulator.clock import ScaledClock
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import (FLAWS, ErrorRates, OpenAIPolicy, PolicyError, PolicyRequest,
                                              ReferencePolicy, flawed_edit, parsed_from_openai)
from instrumentation.simulator.population import Population, start_instant
from codetasks.tasks import grade, make_task
from instrumentation.simulator.user import ListSink
from codetasks.workspace import make_workspace, org_of
from schemas.events import ResponseKind, ToolCallStatus
from schemas.tool_protocol import openai_tools, parse_response
from tests.unit.simulator.mock_server import completion


def _task(ambiguous=False):
    ws = make_workspace(0, org_of(0), 0, 5)
    rng = random.Random(1)
    return next(t for k in range(200) if (t := make_task(rng, ws, str(k), ambiguous_rate=0.5)).ambiguous == ambiguous)


def mock_policy(answer, seen=None, models=("rtrl-policy",)):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "rtrl"} for m in models]})
        body = json.loads(request.content)
        if seen is not None:
            seen.append(body)
        return answer(body)

    return OpenAIPolicy("http://policy.test/v1", http_client=httpx.Client(transport=httpx.MockTransport(handler)))


META = {"session_id": "s1", "workspace_id": "w1", "org_id": "o0", "event_time": "2026-11-01T00:00:00+00:00",
        "privacy_mode": False}


def test_the_openai_path_sends_user_tools_and_metadata_and_reads_the_extra_fields():
    task, seen = _task(), []
    policy = mock_policy(lambda b: httpx.Response(200, json=completion(task.edit.text())), seen)
    assert policy.check() == "rtrl-policy"
    reply = policy.respond(PolicyRequest(task.messages(), "u1", META, task))
    body = seen[0]
    assert body["user"] == "u1" and body["metadata"] == META and body["messages"] == task.messages()
    assert body["tools"] == openai_tools() and body["model"] == "rtrl-policy"
    assert (reply.request_id, reply.policy_version, reply.arm) == ("req-1", "7", "treatment")
    assert reply.kind is ResponseKind.edit and reply.parsed.calls == [task.edit]
    assert reply.text == task.edit.text() and reply.completion_tokens == 12
    assert grade(task, reply.parsed).correct


@pytest.mark.parametrize("text, kind, outcome", [
    ('<tool_call>\n{"name": "edit_file", "arguments": {"path": "x"\n</tool_call>', ResponseKind.answer, "broken"),
    ("Which one do you mean?", ResponseKind.question, "question"),
    ("Done.", ResponseKind.answer, "wrong"),
])
def test_broken_calls_questions_and_answers_come_back_as_serving_judged_them(text, kind, outcome):
    task = _task()
    for extras in (True, False):  # with serving's extra fields, and re-parsed from a plain OpenAI server
        policy = mock_policy(lambda b: httpx.Response(200, json=completion(text, extras=extras)))
        reply = policy.respond(PolicyRequest(task.messages(), "u1", META, task))
        assert reply.kind is kind and grade(task, reply.parsed).outcome == outcome
        assert reply.request_id == ("req-1" if extras else "chatcmpl-req-1")
    if outcome == "broken":
        assert reply.parsed.records[0].status is ToolCallStatus.parse_error


def test_a_tool_call_the_client_cannot_validate_is_broken():
    bad = [{"id": "c", "type": "function", "function": {"name": "edit_file", "arguments": '{"path": "a"}'}}]
    parsed = parsed_from_openai(None, bad, "edit", [])
    assert parsed.broken == 1 and not parsed.calls


def test_endpoint_errors_are_policy_errors():
    task = _task()
    policy = mock_policy(lambda b: httpx.Response(500, json={"error": {"message": "engine died"}}))
    policy.client = policy.client.with_options(max_retries=0)
    with pytest.raises(PolicyError, match="engine died"):
        policy.respond(PolicyRequest(task.messages(), "u1", META, task))
    down = OpenAIPolicy("http://127.0.0.1:9/v1", max_retries=0, timeout_s=2)
    with pytest.raises(PolicyError, match="not reachable"):
        down.check()


def test_the_reference_policy_answers_from_the_demonstration_and_injects_errors_deterministically():
    clear, amb = _task(), _task(ambiguous=True)
    ref = ReferencePolicy(3)
    r = ref.respond(PolicyRequest(clear.messages(), "u1", META, clear))
    assert r.text == clear.demonstration() and grade(clear, r.parsed).correct
    q = ref.respond(PolicyRequest(amb.messages(), "u1", META, amb))
    assert q.text == amb.question
    c = ref.respond(PolicyRequest(amb.clarified_messages(q.text), "u1", META, amb))
    assert grade(amb, c.parsed, clarified=True).correct
    for kind in ("wrong", "broken", "malformed", "needless"):
        bad = ReferencePolicy(3, ErrorRates(**{kind: 1.0}))
        out = grade(clear, bad.respond(PolicyRequest(clear.messages(), "u1", META, clear)).parsed)
        assert out.outcome == {"wrong": "wrong", "broken": "broken", "malformed": "broken",
                               "needless": "question"}[kind]
    a, b = (ReferencePolicy(5, ErrorRates(wrong=0.5)) for _ in range(2))
    ids = [(a.respond(PolicyRequest(clear.messages(), f"u{i % 3}", META, clear)).request_id,
            b.respond(PolicyRequest(clear.messages(), f"u{i % 3}", META, clear)).request_id) for i in range(9)]
    assert all(x == y for x, y in ids) and len({x for x, _ in ids}) == 9
    assert [s.injected for s in a.served] == [s.injected for s in b.served]
    with pytest.raises(ValueError):
        ErrorRates(wrong=0.6, broken=0.6)


@pytest.mark.parametrize("ambiguous", [False, True])
def test_each_flawed_edit_fails_the_way_it_is_named(ambiguous):
    task = _task(ambiguous)
    outcomes = {flaw: grade(task, parse_response(flawed_edit(task, flaw)), clarified=True) for flaw in FLAWS}
    assert outcomes["wrong"].outcome == "wrong" and outcomes["wrong"].new_text is not None
    assert outcomes["broken"].outcome == "broken"
    for flaw in ("malformed", "unclosed"):
        parsed = parse_response(flawed_edit(task, flaw))
        assert parsed.broken == 1 and parsed.records[0].status is ToolCallStatus.parse_error, flaw
    with pytest.raises(ValueError, match="unknown flaw"):
        flawed_edit(task, "sloppy")


def test_users_drive_an_openai_endpoint_concurrently_on_the_scaled_clock():
    counter, lock, seen = itertools.count(), threading.Lock(), []

    def answer(body):
        with lock:
            n = next(counter)
        return httpx.Response(200, json=completion("Which file do you mean?", request_id=f"req-{n}"))

    policy = mock_policy(answer, seen)
    cfg = SimulatorConfig(users=4, speed=20_000, privacy_rate=0.0, max_turns=2)
    start = start_instant(cfg, 1.0)
    sink = ListSink()
    clock = ScaledClock(start, cfg.speed)
    pop = Population(cfg, policy, sink, clock)
    pop.run(start + timedelta(seconds=1.0 * cfg.speed))
    end = clock.now()   # the run drains past its deadline; at 20,000x a loaded machine's lag is hours of it
    s = pop.summary()
    n = s["requests"]
    assert n > 20 and s["by_arm"] == {"treatment": n} and s["by_policy_version"] == {"7": n}
    assert {b["user"] for b in seen} == {u.user_id for u in pop.users}
    ids = {f"req-{i}" for i in range(len(seen))}
    follow = [e for e in sink.events if e.event_type == "followup_message"]
    assert follow and {e.previous_request_id for e in follow} <= ids
    for b in seen:  # the metadata is the simulated clock's, in the run's span
        t = datetime.fromisoformat(b["metadata"]["event_time"])
        assert start <= t <= end
    assert not s["failures"]
