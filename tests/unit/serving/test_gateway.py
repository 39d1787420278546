"""The gateway over fake engines: HTTP status codes, response fields, routing and the trajectory it emits."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from schemas.events import Trajectory
from schemas.tool_protocol import ToolCall
from serving.app import Gateway, create_app
from serving.arms import Fleet
from serving.config import ServingConfig
from serving.router import Router
from tests.unit.serving.fakes import FakeLoader, FakeRegistry

EDIT = ToolCall("edit_file", {"path": "a.py", "old": "X = 1", "new": "X = 2"})


def gateway(aliases=None, reply=None, **cfg) -> tuple[Gateway, list[Trajectory], FakeLoader]:
    scfg = ServingConfig(**cfg)
    loader = FakeLoader(reply=reply, max_model_len=scfg.max_model_len)
    events: list[Trajectory] = []
    fleet = Fleet(scfg, FakeRegistry(aliases or {"control": "1", "champion": "2"}), loader)
    return Gateway(scfg, fleet, "rtrl-policy", emit=events.append), events, loader


@pytest.fixture
def served():
    gw, events, loader = gateway()
    with TestClient(create_app(gw, poll=False)) as client:
        yield client, gw, events, loader


def chat(client, user="user-1", **kw):
    body = {"model": "x", "user": user, "messages": [{"role": "user", "content": "fix it"}], **kw}
    return client.post("/v1/chat/completions", json=body)


def test_a_request_is_served_by_its_users_arm_and_logged(served):
    client, gw, events, _ = served
    router = Router(gw.cfg.experiment, gw.cfg.arms)
    users = [f"user-{i}" for i in range(20)]
    for u in users:
        r = chat(client, user=u, metadata={"session_id": f"s-{u}"})
        assert r.status_code == 200, r.text
        body = r.json()
        arm = router.assign(u)
        assert body["arm"] == arm and body["policy_version"] == {"control": "1", "treatment": "2"}[arm]
        assert body["choices"][0]["message"]["content"] == f"answer from v{body['policy_version']}"
        assert len(body["choices"][0]["logprobs"]["content"]) == body["usage"]["completion_tokens"]
    assert len(events) == len(users) and {e.arm for e in events} == {"control", "treatment"}
    assert [e.user_id for e in events] == users and events[0].session_id == "s-user-0"
    assert gw.counts["served"] == len(users)


def test_bad_requests_are_400_with_an_openai_error_body(served):
    client, gw, events, _ = served
    r = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = chat(client, stream="yes")
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "user"
    assert events == [] and gw.counts["rejected"] == 3


def test_a_prompt_longer_than_the_context_is_400():
    gw, _, _ = gateway(max_model_len=64)
    with TestClient(create_app(gw, poll=False)) as client:
        r = chat(client, messages=[{"role": "user", "content": "x" * 200}])
        assert r.status_code == 400 and "context is 64 tokens" in r.json()["error"]["message"]


def test_tool_calls_and_seed_and_budget_reach_the_engine_and_the_answer():
    gw, events, loader = gateway(reply=EDIT.text(), max_tokens=500)
    with TestClient(create_app(gw, poll=False)) as client:
        body = chat(client, seed=5, max_tokens=400).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["tool_calls"][0]["function"]["name"] == \
        "edit_file"
    assert body["response_kind"] == "edit" and events[0].response_kind.value == "edit"
    call = next(e for e in loader.engines if e.calls).calls[0]
    assert call["seed"] == 5 and call["max_tokens"] == 400


def test_models_and_health(served):
    client, *_ = served
    models = client.get("/v1/models").json()
    assert models["data"][0]["id"] == "rtrl-policy" and models["data"][0]["arms"] == {"control": "1",
                                                                                      "treatment": "2"}
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert {e["version"] for e in health.json()["engines"]} == {"1", "2"}


def test_two_arms_on_the_same_version_share_one_engine():
    gw, _, loader = gateway(aliases={"control": "4", "champion": "4"})
    with TestClient(create_app(gw, poll=False)) as client:
        assert {chat(client, user=f"u{i}").json()["policy_version"] for i in range(10)} == {"4"}
    assert len(loader.engines) == 1 and loader.engines[0].shut_down


def test_an_engine_failure_is_a_500_with_the_reason_and_telemetry_failures_do_not_fail_requests():
    gw, _, loader = gateway()

    def broken_emit(event):
        raise RuntimeError("queue on fire")

    gw.emit = broken_emit
    with TestClient(create_app(gw, poll=False)) as client:
        assert chat(client).status_code == 200
        assert gw.counts["telemetry_errors"] == 1

        async def boom(*a, **k):
            raise RuntimeError("engine died")

        for e in loader.engines:
            e.sample = boom
        r = chat(client)
        assert r.status_code == 500 and "engine died" in r.json()["error"]["message"]


def test_an_unset_alias_fails_start_up_with_the_bootstrap_hint():
    gw, _, _ = gateway(aliases={"control": "1"})
    with pytest.raises(LookupError, match="rtrl bootstrap"):
        with TestClient(create_app(gw, poll=False)):
            pass


def test_the_official_openai_client_reads_tool_calls_and_rtrl_fields():
    import openai

    gw, events, _ = gateway(reply=EDIT.text())
    with TestClient(create_app(gw, poll=False)) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
        r = client.chat.completions.create(model="rtrl-policy", user="user-7", logprobs=True,
                                           messages=[{"role": "user", "content": "bump X"}],
                                           metadata={"session_id": "s-7", "privacy_mode": "true"})
        with pytest.raises(openai.BadRequestError, match="names no user"):
            client.chat.completions.create(model="rtrl-policy", messages=[{"role": "user", "content": "x"}])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "edit_file" and json.loads(call.function.arguments) == EDIT.arguments
    assert r.model_extra["response_kind"] == "edit" and r.model_extra["tool_call_records"][0]["status"] == "ok"
    assert r.model_extra["arm"] in ("control", "treatment") and r.model_extra["policy_version"] in ("1", "2")
    assert len(choice.logprobs.content) == r.usage.completion_tokens
    assert events[0].privacy_mode and events[0].completion_token_ids == [] and events[0].session_id == "s-7"
