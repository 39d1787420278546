"""A real third-party agent client, pydantic-ai (`pydantic-ai-slim[openai]`, pinned in the dev extra), driving
serving through multi-turn coding sessions with tool calls; then the trajectories serving emitted are checked.

The client runs as it would against any OpenAI-compatible server: `OpenAIChatModel` over `base_url` with an API
key (no `user` in any body: the key names the user), its own tools (`read_file`, `edit_file` over an in-memory
workspace, and `list_files`, which is not one of the five built-in tools: a client-defined tool is offered in every
request), pydantic-ai's own tool loop (model calls a tool -> the client runs it -> sends the result -> model
answers), `seed`, `temperature` and `max_tokens` through its model settings, and streaming (`stream: true`,
`stream_options.include_usage`) whenever an `event_stream_handler` is given: sessions alternate between both.

Configuration: the shared gateway of tests/integration/conftest.py, i.e. the default policy v0 (a 2M-parameter
Llama, max_position_embeddings 1024) at the default `serving.max_model_len` 1024. pydantic-ai adds no system
prompt of its own and v0's chat template does not render `tools`, so a first request is ~140-150 tokens of v0's
tokenizer (the three tools' JSON would add ~460 if a template rendered them) and a three-request session stays
well under 1024: no larger `max_model_len` is needed.

The sessions are the default policy's own kind of task (codetasks: a file and a request to change it), so v0
answers with Hermes `<tool_call>` blocks for `edit_file`. A session ends when the model answers in text or after
REQUEST_LIMIT requests (pydantic-ai's usage limit). The model's quality is not judged: whatever it wrote, the
checks are on what serving recorded, and sessions go on until at least one tool call made a full round trip.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid

import pytest

from tests.integration.kafka_read import read_json_records
from tests.waiting import wait_for

# exclusive: it shares the session's gateway (conftest `served`) with test_serving, whose hot swap is exclusive,
# so both run in the same pytest process of ./infra/test.sh's second phase (one vLLM start for both)
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

REQUEST_LIMIT = 3       # model requests per session (pydantic-ai's UsageLimits): every session ends
MAX_SESSIONS = 6        # sessions until a tool call round trip has happened (v0 writes one in nearly every first turn)
MIN_SESSIONS = 2        # at least one non-streamed and one streamed session
TEMPERATURE = 0.5
MAX_TOKENS = 160        # an edit_file call of v0 is ~60-100 tokens
BUILT_IN = {"read_file", "edit_file", "search", "run_terminal", "lint"}


def _key(cfg, client_id: str, org: str) -> str:
    """A client-role API key for `client_id` in the keys file serving reads (as the collector's)."""
    from schemas.api_keys import KeyStore

    return KeyStore(cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json")).create(
        client_id, org=org, role="client")


def _key_accepted(url: str, key: str) -> bool:
    """Whether serving knows `key` yet (it re-reads the keys file within a second). The probe is a request that
    authenticates and then fails validation (400), so it leaves no trajectory."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
    try:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "x"}], top_p=0)
    except openai.AuthenticationError:
        return False
    except openai.BadRequestError:
        return True
    return True


def _task(seed: int):
    """A workspace and an unambiguous task in it, of the kind v0 was trained on."""
    from codetasks.tasks import make_task
    from codetasks.workspace import make_workspace, org_of

    ws = make_workspace(seed, org_of(seed % 4, seed), seed)
    task = make_task(random.Random(f"agent-client:{seed}"), ws, f"agent-{seed}", ambiguous_rate=0.0)
    return task, {path: ws.text(path) for path in ws.files}


def _agent(url: str, key: str, system: str, files: dict[str, str], bodies: list[dict]):
    """A pydantic-ai agent with three coding tools over `files`; every request body it sends lands in `bodies`."""
    import httpx
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from codetasks.workspace import EditError, apply_edit

    async def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            bodies.append(json.loads(request.content))

    http = httpx.AsyncClient(timeout=120, event_hooks={"request": [record]})
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, http_client=http)
    agent = Agent(OpenAIChatModel("rtrl-policy", provider=OpenAIProvider(openai_client=client)), system_prompt=system)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return files.get(path, f"error: no file {path}")

    @agent.tool_plain
    def edit_file(path: str, old: str, new: str) -> str:
        """Replace the single occurrence of `old` in a file with `new`."""
        if path not in files:
            return f"error: no file {path}"
        try:
            files[path] = apply_edit(files[path], old, new)
        except EditError as e:
            return f"error: {e}"
        return f"edited {path}; it now has {files[path].count(chr(10))} lines"

    @agent.tool_plain
    def list_files(prefix: str = "") -> list[str]:
        """List the workspace's files whose path starts with `prefix`."""
        return sorted(p for p in files if p.startswith(prefix))

    return agent, http


async def _session(url: str, key: str, seed: int, stream: bool) -> dict:
    """One agent run on a fresh task: the messages pydantic-ai kept, the request bodies it sent."""
    from pydantic_ai import capture_run_messages
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.usage import UsageLimits

    task, files = _task(seed)
    system, user = (m["content"] for m in task.messages())
    bodies: list[dict] = []
    agent, http = _agent(url, key, system, files, bodies)
    kw = {}
    if stream:  # pydantic-ai streams every model request of a run given an event handler (as agent UIs do)
        async def consume(ctx, events):
            async for _ in events:
                pass
        kw["event_stream_handler"] = consume
    ended = "answer"
    try:
        with capture_run_messages() as messages:
            try:
                await agent.run(user, model_settings={"seed": seed, "temperature": TEMPERATURE,
                                                      "max_tokens": MAX_TOKENS},
                                usage_limits=UsageLimits(request_limit=REQUEST_LIMIT), **kw)
            except UsageLimitExceeded:
                ended = "request limit"
    finally:
        await http.aclose()
    return {"messages": list(messages), "bodies": bodies, "stream": stream, "ended": ended, "seed": seed}


def _request_id(response) -> str:
    rid = response.provider_response_id or ""
    assert rid.startswith("chatcmpl-"), f"a response id that is not serving's: {rid!r}"
    return rid[len("chatcmpl-"):]


def _of_users(cfg, users: set[str], request_ids: set[str], deadline_s: float = 60.0) -> dict[str, dict]:
    """Every trajectory on the topic of one of `users`, read until those with `request_ids` are all there."""
    return read_json_records(cfg.kafka.bootstrap(),
                             [("trajectories", p) for p in range(cfg.kafka.partitions_for("trajectories"))],
                             lambda d: d.get("request_id") if d.get("user_id") in users else None,
                             lambda found: request_ids <= set(found), deadline_s)


def _serve_v0(served) -> None:
    """Both arms on version A (the default policy v0): a test before this one may have moved the aliases."""
    cfg, gateway, url, registry, versions, _ = served
    a = versions[0]
    if set(gateway.fleet.arm_versions().values()) != {a}:
        registry.set_alias("control", a)
        registry.set_alias("champion", a)
        wait_for(lambda: set(gateway.fleet.arm_versions().values()) == {a}, 300, "both arms back on v0",
                 interval_s=0.5)


def test_pydantic_ai_agent_sessions_with_tool_calls_yield_one_checked_trajectory_per_request(served):
    from transformers import AutoTokenizer
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    cfg, gateway, url, _, versions, folders = served
    _serve_v0(served)
    tok = AutoTokenizer.from_pretrained(str(folders[0]))
    run = uuid.uuid4().hex[:8]
    org = f"org-agent-{run}"

    sessions, round_trips = [], 0
    while len(sessions) < MAX_SESSIONS and (len(sessions) < MIN_SESSIONS or round_trips == 0):
        k = len(sessions)
        user = f"agent-{run}-{k}"
        key = _key(cfg, user, org)
        wait_for(lambda: _key_accepted(url, key), 30, f"serving to accept the key of {user}", interval_s=0.2)
        s = asyncio.run(_session(url, key, seed=1000 + k, stream=k % 2 == 1))
        s["user"] = user
        responses = [m for m in s["messages"] if isinstance(m, ModelResponse)]
        s["responses"] = responses
        # a round trip: a call the client ran, whose result went back to serving in a later request
        calls = [p for r in responses[:-1] for p in r.parts if isinstance(p, ToolCallPart)]
        round_trips += len(calls)
        sessions.append(s)
        print(f"session {k} ({'streamed' if s['stream'] else 'not streamed'}): {len(responses)} requests, "
              f"{len(calls)} tool round trips, ended by {s['ended']}")
    assert round_trips > 0, "no tool call made a round trip in any session"

    # -- what the client sent: its own tools, no `user`, streaming as asked, its seed and temperature ----------------
    for s in sessions:
        assert len(s["bodies"]) == len(s["responses"]), "every request the client sent got an answer it kept"
        for b in s["bodies"]:
            offered = {t["function"]["name"] for t in b["tools"]}
            assert offered == {"read_file", "edit_file", "list_files"} and "user" not in b
            assert b.get("stream", False) == s["stream"] and (b["seed"], b["temperature"]) == (s["seed"], TEMPERATURE)

    # -- one trajectory per model request, of this client's users only ------------------------------------------------
    rids = {_request_id(r): (s, i) for s in sessions for i, r in enumerate(s["responses"])}
    assert len(rids) == sum(len(s["responses"]) for s in sessions), "distinct request ids"
    events = _of_users(cfg, {s["user"] for s in sessions}, set(rids))
    assert set(events) == set(rids), "exactly one trajectory per request the client made"
    assert all(e["request_id"] == rid for rid, e in events.items())

    for s in sessions:
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in s["bodies"][0]["tools"]}
        evs = [events[_request_id(r)] for r in s["responses"]]
        assert {(e["user_id"], e["org_id"]) for e in evs} == {(s["user"], org)}, "identity from the key"
        assert {e["arm"] for e in evs} == {gateway.router.assign(s["user"])}, "one sticky arm per user"
        assert {e["policy_version"] for e in evs} == {versions[0]}
        for r, e in zip(s["responses"], evs):
            # behaviour log-probs: one per completion token, as the client's usage counted them
            n = e["completion_tokens"]
            assert 0 < n == len(e["completion_token_ids"]) == len(e["behaviour_logprobs"]) == r.usage.output_tokens
            assert all(lp <= 0 for lp in e["behaviour_logprobs"])
            assert e["prompt_tokens"] == len(e["prompt_token_ids"]) == r.usage.input_tokens
            assert e["temperature"] == TEMPERATURE and not e["cut_short"] and e["group_id"] is None
            # tool calls: the valid ones are what the client received and ran; all are judged by the offered tools
            received = [p for p in r.parts if isinstance(p, ToolCallPart)]
            ok = [c for c in e["tool_calls"] if c["status"] == "ok"]
            assert [c["name"] for c in ok] == [p.tool_name for p in received]
            for p in received:
                _validate(p.args_as_dict(), schemas[p.tool_name])
            for c in e["tool_calls"]:
                if c["name"] and c["name"] not in schemas:   # e.g. a built-in tool this client does not offer
                    assert c["status"] != "ok", c
                if c["status"] != "ok":
                    assert c["error"], c
        # the prompts grow: each request's prompt is the previous one's plus the call and the tool results it sent
        for i in range(1, len(evs)):
            before, after = evs[i - 1]["prompt_token_ids"], evs[i]["prompt_token_ids"]
            assert len(after) > len(before) and after[:len(before)] == before
            added = tok.decode(after[len(before):], skip_special_tokens=False)
            new = s["bodies"][i]["messages"][len(s["bodies"][i - 1]["messages"]):]
            sent = [m["content"] for m in new if m["role"] in ("tool", "user")]  # tool results (or a retry prompt)
            assert sent and all(c in added for c in sent), (sent, added)


def _validate(arguments: dict, schema: dict) -> None:
    import jsonschema

    jsonschema.validate(arguments, schema)

