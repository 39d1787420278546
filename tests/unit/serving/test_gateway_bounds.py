"""Input bounds and secrets at the serving gateway: oversized bodies are refused while reading (also when
Content-Length lies or the body is chunked), conversations that cannot fit the model are refused before they are
tokenized, and a request whose prompt or completion holds a secret is served but logged without token ids."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from infra.bench.asgi import raw_post
from serving.app import MAX_BODY_BYTES, MAX_MESSAGES, PROMPT_CHARS_PER_TOKEN, create_app
from tests.unit.serving.test_gateway import chat, gateway

GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def _raw_post(app, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, dict, int]:
    reply = raw_post(app, "/v1/chat/completions", [(k.encode(), v.encode()) for k, v in headers.items()], chunks)
    return reply.status, reply.json(), reply.chunks_pulled


def test_a_body_over_the_cap_is_413_after_reading_at_most_the_cap_even_when_content_length_lies():
    gw, events, loader = gateway()
    with TestClient(create_app(gw, poll=False)) as client:
        chunk = b" " * (1024 * 1024)
        n = MAX_BODY_BYTES // len(chunk) + 8
        status, body, pulled = _raw_post(client.app, {"content-type": "application/json", "content-length": "10"},
                                         [chunk] * n)
        assert status == 413 and body["error"]["type"] == "invalid_request_error"
        assert pulled <= MAX_BODY_BYTES // len(chunk) + 1 < n  # stopped reading past the cap
        r = client.post("/v1/chat/completions", content=b" " * 10,
                        headers={"content-type": "application/json", "content-length": str(MAX_BODY_BYTES + 1)})
        assert r.status_code == 413
    assert events == [] and all(e.calls == [] for e in loader.engines)


def test_too_many_messages_or_more_text_than_the_context_can_hold_is_400_before_tokenizing():
    gw, events, loader = gateway()
    with TestClient(create_app(gw, poll=False)) as client:
        many = [{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)
        r = client.post("/v1/chat/completions", json={"user": "u", "messages": many})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        huge = "y" * (PROMPT_CHARS_PER_TOKEN * gw.cfg.max_model_len + 1)
        r = client.post("/v1/chat/completions", json={"user": "u", "messages": [{"role": "user", "content": huge}]})
        assert r.status_code == 400 and "context" in r.json()["error"]["message"]
        r = chat(client, max_tokens=10**12)
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    assert events == [] and all(e.calls == [] for e in loader.engines)


def test_a_request_with_a_secret_in_its_prompt_is_answered_but_its_trajectory_carries_no_token_ids():
    gw, events, _ = gateway()
    with TestClient(create_app(gw, poll=False)) as client:
        secret = chat(client, messages=[{"role": "user", "content": f"deploy with token {GITHUB_TOKEN} please"}])
        plain = chat(client, messages=[{"role": "user", "content": "rename total to amount"}])
    assert secret.status_code == plain.status_code == 200
    leaked, clean = events
    assert leaked.privacy_mode and leaked.prompt_token_ids == [] and leaked.completion_token_ids == []
    assert leaked.prompt_tokens > 0  # counts stay for latency/length metrics
    assert not clean.privacy_mode and clean.prompt_token_ids
    assert gw.counts["secret_requests_not_logged"] == 1


def test_a_completion_that_echoes_a_secret_is_logged_without_token_ids():
    gw, events, _ = gateway(reply=f"use {GITHUB_TOKEN}")
    with TestClient(create_app(gw, poll=False)) as client:
        assert chat(client).status_code == 200
    [e] = events
    assert e.privacy_mode and e.completion_token_ids == [] and e.behaviour_logprobs == []


def test_a_failing_request_with_a_secret_in_its_prompt_logs_no_secret(caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    gw, events, loader = gateway()
    with TestClient(create_app(gw, poll=False)) as client:
        for e in loader.engines:
            async def boom(*a, **k):
                raise RuntimeError("engine died")
            e.sample = boom
        r = chat(client, messages=[{"role": "user", "content": f"token {GITHUB_TOKEN}"}])
        bad = client.post("/v1/chat/completions", content=f'{{"user": "u", "messages": "{GITHUB_TOKEN}'.encode(),
                          headers={"content-type": "application/json"})
    assert r.status_code == 500 and bad.status_code == 400
    assert "request failed" in caplog.text and GITHUB_TOKEN not in caplog.text
