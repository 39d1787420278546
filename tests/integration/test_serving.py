"""The gateway with real vLLM engines (CPU build), the MLflow registry and the session broker, driven by the
official `openai` client: response fields, the serving contract (logprobs = transformers' teacher-forced
log-softmax), the trajectory event in Kafka, and a hot swap under concurrent load with zero failed requests.

The gateway is tests/integration/conftest.py's `served`, shared with the other tests that use it (an engine takes
~25 s to start on CPU): version A is the default policy v0, B a random-init tiny checkpoint; arms control → alias
`control`, treatment → alias `champion`, both on A at first (one shared engine).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from tests.integration.gateway import openai_client, teacher_forced_logprobs, trajectories, users_of
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

LOGPROB_TOLERANCE = 1e-3  # absolute, vLLM CPU fp32 vs transformers fp32 (measured differences are ~1e-5)


def ask(client, user: str, **kw):
    return client.chat.completions.create(model="rtrl-policy", user=user, logprobs=True,
                                          messages=[{"role": "user", "content": "Raise RETRIES in app/util.py"}],
                                          **kw)


def test_openai_client_gets_policy_version_arm_and_per_token_logprobs(served):
    cfg, gateway, url, _, versions, _ = served
    client = openai_client(url)
    for arm in ("control", "treatment"):
        user = users_of(gateway, arm, 1)[0]
        r = ask(client, user, max_tokens=24, seed=3)
        extra = r.model_extra
        assert extra["arm"] == arm and extra["policy_version"] == versions[0]
        assert extra["request_id"] and extra["response_kind"] in ("edit", "question", "answer")
        assert isinstance(extra["tool_call_records"], list)
        content = r.choices[0].logprobs.content
        assert len(content) == r.usage.completion_tokens and 0 < r.usage.completion_tokens <= 24
        assert all(c.logprob <= 0 for c in content) and r.choices[0].finish_reason in ("stop", "length")
        assert r.model == f"{cfg.mlflow.registered_model}/v{versions[0]}"
        again = ask(client, user, max_tokens=24, seed=3)  # a seeded request is repeatable
        assert [c.logprob for c in again.choices[0].logprobs.content] == [c.logprob for c in content]
    models = client.models.list()
    assert models.data[0].id == cfg.mlflow.registered_model


def test_bad_requests_are_refused_with_400(served):
    import openai

    _, _, url, *_ = served
    client = openai_client(url)
    with pytest.raises(openai.BadRequestError, match="names no user"):   # no key, no user: nobody to route
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="top_p"):
        client.chat.completions.create(model="x", user="u", top_p=0, messages=[{"role": "user", "content": "x"}])


def test_logprobs_equal_transformers_teacher_forcing_and_the_trajectory_reaches_kafka(served):
    """The serving contract (docs/serving.md): the behaviour logprobs serving logs are the log-probs the trainer
    computes for the same prompt + completion (temperature 1, untruncated)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from schemas.chat_format import render

    cfg, gateway, url, _, versions, folders = served
    client = openai_client(url)
    request_ids, responses, users = set(), {}, {}
    recent = (datetime.now(timezone.utc) - timedelta(minutes=5)).replace(microsecond=0).isoformat()
    for i, user in enumerate(users_of(gateway, "treatment", 3)):
        rid = f"contract-{uuid.uuid4().hex}"
        r = ask(client, user, max_tokens=48, metadata={"request_id": rid, "session_id": f"s-{i}",
                                                       "workspace_id": "ws-1", "org_id": "org-1",
                                                       "event_time": recent})
        assert r.model_extra["request_id"] == rid
        request_ids.add(rid)
        responses[rid], users[rid] = r, user
    events = trajectories(cfg.kafka.bootstrap(), cfg.kafka.partitions_for("trajectories"), request_ids)
    assert set(events) == request_ids, "every request's trajectory reaches Kafka"

    tok = AutoTokenizer.from_pretrained(str(folders[0]))
    model = AutoModelForCausalLM.from_pretrained(str(folders[0]), dtype=torch.float32).eval()
    prompt = tok(render([{"role": "user", "content": "Raise RETRIES in app/util.py"}]),
                 add_special_tokens=False)["input_ids"]
    worst = 0.0
    for rid, e in events.items():
        r = responses[rid]
        assert (e["policy_version"], e["arm"], e["user_id"], e["workspace_id"], e["org_id"]) == \
            (versions[0], "treatment", users[rid], "ws-1", "org-1")
        assert datetime.fromisoformat(e["event_time"]) == datetime.fromisoformat(recent)
        assert e["session_id"].startswith("s-")
        assert e["prompt_token_ids"] == prompt  # serving's chat template = the shared chat format
        assert (e["temperature"], e["top_p"], e["top_k"]) == (1.0, 1.0, -1)
        served_lp = [c.logprob for c in r.choices[0].logprobs.content]
        assert e["behaviour_logprobs"] == pytest.approx(served_lp, abs=1e-6)
        assert len(e["completion_token_ids"]) == e["completion_tokens"] == r.usage.completion_tokens
        ref = teacher_forced_logprobs(model, e["prompt_token_ids"], e["completion_token_ids"])
        diff = (ref - torch.tensor(e["behaviour_logprobs"])).abs().max().item()
        worst = max(worst, diff)
    print(f"serving contract: max |serving - transformers| logprob = {worst:.2e} over {len(events)} requests")
    assert worst < LOGPROB_TOLERANCE, f"max |serving - transformers| = {worst:.2e}"


def test_hot_swap_under_concurrent_load_fails_no_request(served, monkeypatch):
    cfg, gateway, url, registry, versions, _ = served
    a, b = versions
    treatment = users_of(gateway, "treatment", 6)
    control = users_of(gateway, "control", 2)
    results: list[dict] = []
    lock = threading.Lock()
    stop = threading.Event()
    loads: list[str] = []  # every engine the fleet builds from here on (no spares in this config)
    load = gateway.fleet.loader
    monkeypatch.setattr(gateway.fleet, "loader", lambda version, *args, **kw: (loads.append(version),
                                                                               load(version, *args, **kw))[1])

    def hammer(user: str):
        client = openai_client(url)
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                r = ask(client, user, max_tokens=16)
                rec = {"ok": True, "version": r.model_extra["policy_version"], "arm": r.model_extra["arm"]}
            except Exception as e:  # noqa: BLE001 -- every failure is counted, none may happen
                rec = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            rec.update(user=user, start=t0, end=time.monotonic())
            with lock:
                results.append(rec)

    threads = [threading.Thread(target=hammer, args=(u,), daemon=True) for u in treatment + control]
    for t in threads:
        t.start()

    def finished(users: list[str], started_after: float) -> bool:
        """Whether one of `users` has a request done (answered or failed) that it started after `started_after`."""
        with lock:
            return any(r["user"] in users and r["start"] > started_after for r in results)

    def swap(match):
        return next((s for s in gateway.fleet.swaps if match(s)), None)

    try:
        # a cold engine's first answers can take long
        wait_for(lambda: finished(treatment, float("-inf")), 300, "a first answer from treatment")
        t_move = time.monotonic()
        registry.set_alias("champion", b)  # promotion: treatment moves to B, control stays on A (shared engine)
        first = wait_for(lambda: swap(lambda s: s.to_version == b), 300, "treatment's swap to B", interval_s=0.2)
        t_switched = time.monotonic()
        # on a loaded machine one request can outlast the whole switch: go on until treatment has answered one it
        # started after the switch, so that the version check below has something to check
        wait_for(lambda: finished(treatment, t_switched), 300, "treatment's answer to a request after the switch")
        registry.set_alias("control", b)  # now nobody uses A: its engine drains and shuts down
        second = wait_for(lambda: swap(lambda s: s.alias == "control"), 300, "control's swap to B", interval_s=0.05)
        t_control_switched = time.monotonic()
        wait_for(lambda: second.old_engine_shut_down, 300, "A's engine shut down after draining", interval_s=0.2)
        t_shut_down = time.monotonic()
        # both arms still answer once A's engine is gone (and control's version check has requests to check)
        wait_for(lambda: finished(control, t_shut_down) and finished(treatment, t_shut_down), 300,
                 "both arms' answers to requests started after A's engine shut down")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)

    failures = [r for r in results if not r["ok"]]
    assert failures == [], failures[:3]
    assert first.from_version == a and first.arms == ["treatment"] and first.load_s > 0
    assert (second.from_version, second.arms) == (a, ["control"]) and second.old_engine_shut_down
    assert loads == [b]  # one engine built, for treatment's swap; control's swap found B loaded: no new engine
    treat = [r for r in results if r.get("arm") == "treatment"]
    assert {r["version"] for r in treat if r["end"] < t_move} == {a}
    assert {r["version"] for r in treat if r["start"] > t_switched} == {b}
    assert {r["version"] for r in results if r["arm"] == "control" and r["start"] > t_control_switched} == {b}
    assert [e["version"] for e in gateway.fleet.status()["engines"]] == [b]
    assert sum(r["arm"] == "treatment" for r in results) > 20
    print(f"hot swap: {len(results)} requests, 0 failed; load {first.load_s:.1f}s, "
          f"old engine drained in {second.drain_s}s")


# -- real clients: a key instead of `user`, streaming, tools, groups -----------------------------------------------

CLIENT_TOOLS = [
    {"type": "function", "function": {"name": "get_ticket", "description": "Fetch a ticket of the issue tracker.",
                                      "parameters": {"type": "object", "properties": {"id": {"type": "integer"}},
                                                     "required": ["id"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                     "required": ["path"]}}}]
PROMPT = [{"role": "user", "content": "Raise RETRIES in app/util.py"}]


@pytest.fixture(scope="module")
def keyed(served):
    """(cfg, gateway, url, an openai client with a client key of org-it and no `user`, the key's client id)."""
    import openai

    from schemas.api_keys import KeyStore

    cfg, gateway, url, *_ = served
    key = KeyStore(cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json")).create(
        "it-editor", org="org-it", role="client")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
    # the gateway reads a changed keys file within a second
    wait_for(lambda: _authenticated(client), 30, "the new key to be accepted", interval_s=0.2)
    return cfg, gateway, url, client, "it-editor"


def _authenticated(client) -> bool:
    import openai

    try:  # top_p 0 is refused after authentication: no request is served, no trajectory logged
        client.chat.completions.create(model="x", messages=PROMPT, top_p=0)
    except openai.AuthenticationError:
        return False
    except openai.BadRequestError:
        return True
    raise AssertionError("top_p 0 was served")


def test_the_official_client_with_a_key_and_no_user_streams_groups_and_calls_tools(keyed):
    """Non-streamed, streamed (same seed: the same trajectory), a tools round trip with a client-defined tool and
    n=4, all without `user`: the key's client id routes and its org is the events' org."""
    import openai

    cfg, gateway, url, client, me = keyed
    run = uuid.uuid4().hex[:8]
    rid = {k: f"{k}-{run}" for k in ("plain", "stream", "tools", "tool-result", "group")}
    plain = client.chat.completions.create(model="x", messages=PROMPT, seed=11, max_tokens=32,
                                           metadata={"request_id": rid["plain"]})
    assert plain.model_extra["arm"] == gateway.router.assign(me)

    chunks = list(client.chat.completions.create(model="x", messages=PROMPT, seed=11, max_tokens=32, stream=True,
                                                 stream_options={"include_usage": True},
                                                 metadata={"request_id": rid["stream"]}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == (plain.choices[0].message.content or "") and finish == [plain.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens

    first = client.chat.completions.create(model="x", messages=PROMPT, tools=CLIENT_TOOLS, max_tokens=32,
                                           metadata={"request_id": rid["tools"]})
    assert all(r["status"] != "ok" or r["name"] in ("get_ticket", "read_file")
               for r in first.model_extra["tool_call_records"])
    call = {"id": "call_1", "type": "function", "function": {"name": "get_ticket", "arguments": '{"id": 7}'}}
    history = PROMPT + [{"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "Ticket 7: RETRIES must be 5"}]
    second = client.chat.completions.create(model="x", messages=history, tools=CLIENT_TOOLS, tool_choice="auto",
                                            max_tokens=32, metadata={"request_id": rid["tool-result"]})
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")

    group = client.chat.completions.create(model="x", messages=PROMPT, n=4, max_tokens=16,
                                           metadata={"request_id": rid["group"]})
    assert [c.index for c in group.choices] == [0, 1, 2, 3]
    with pytest.raises(openai.PermissionDeniedError, match="org"):
        client.chat.completions.create(model="x", messages=PROMPT, metadata={"org_id": "another-org"})

    wanted = {rid["plain"], rid["stream"], rid["tools"], rid["tool-result"]} | {f"{rid['group']}-{i}" for i in range(4)}
    events = trajectories(cfg.kafka.bootstrap(), cfg.kafka.partitions_for("trajectories"), wanted)
    assert set(events) == wanted
    assert all((e["user_id"], e["org_id"]) == (me, "org-it") for e in events.values())
    a, b = events[rid["plain"]], events[rid["stream"]]
    assert (a["completion_token_ids"], a["behaviour_logprobs"]) == (b["completion_token_ids"], b["behaviour_logprobs"])
    assert not b["cut_short"] and b["prompt_token_ids"] == a["prompt_token_ids"]
    assert {events[f"{rid['group']}-{i}"]["group_id"] for i in range(4)} == {rid["group"]}
    assert len(events[rid["tool-result"]]["prompt_token_ids"]) > len(events[rid["tools"]]["prompt_token_ids"])


def test_sampling_settings_are_used_and_logged(keyed):
    cfg, gateway, url, client, _ = keyed
    rid = f"sampling-{uuid.uuid4().hex[:8]}"
    r = client.chat.completions.create(model="x", messages=PROMPT, temperature=0.2, top_p=0.9, max_tokens=16,
                                       logprobs=True, top_logprobs=3, metadata={"request_id": rid})
    assert r.model_extra["sampling"] == {"temperature": 0.2, "top_p": 0.9, "top_k": -1}
    content = r.choices[0].logprobs.content
    assert all(len(c.top_logprobs) <= 3 for c in content) and any(c.top_logprobs for c in content)
    e = trajectories(cfg.kafka.bootstrap(), cfg.kafka.partitions_for("trajectories"), {rid})[rid]
    assert (e["temperature"], e["top_p"]) == (0.2, 0.9)
    assert e["behaviour_logprobs"] == pytest.approx([c.logprob for c in content], abs=1e-6)


def test_a_client_that_leaves_mid_stream_still_yields_a_trajectory_cut_short(keyed):
    import httpx

    cfg, gateway, url, client, _ = keyed
    rid = f"cut-{uuid.uuid4().hex[:8]}"
    body = {"model": "x", "messages": PROMPT, "stream": True, "max_completion_tokens": 900,
            "metadata": {"request_id": rid}}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60,
                      headers={"authorization": f"Bearer {client.api_key}"}) as r:
        assert r.status_code == 200
        chunks = (json.loads(line[len("data: "):]) for line in r.iter_lines() if line.startswith("data: {"))
        first = next(c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content"))
    # leaving the block closed the connection after the first content
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["finish_reason"] is None
    e = trajectories(cfg.kafka.bootstrap(), cfg.kafka.partitions_for("trajectories"), {rid}, deadline_s=60)[rid]
    assert e["cut_short"] and 0 < e["completion_tokens"] < 900
    assert len(e["behaviour_logprobs"]) == e["completion_tokens"]
