"""`stream: true` over fake engines: the SSE chunks, the content held back around tool calls and stop strings, the
trajectories (the same as a non-streamed request's), groups of samples, and a client that disconnects."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.testclient import TestClient

from schemas.tool_protocol import ToolCall
from serving.app import create_app
from serving.streaming import ContentStream
from tests.unit.serving.test_gateway import gateway

EDIT = ToolCall("edit_file", {"path": "a.py", "old": "X = 1", "new": "X = 2"})
BODY = {"model": "x", "user": "user-1", "messages": [{"role": "user", "content": "fix it"}]}


# -- what may be sent while sampling ---------------------------------------------------------------------------------

def test_content_is_held_back_where_a_tool_call_could_begin():
    c = ContentStream()
    assert c.update("  Let me ") == "Let me"            # leading whitespace never, trailing not yet
    assert c.update("  Let me look <tool") == " look"   # "<tool" may become <tool_call>
    assert c.update("  Let me look <tool_call>\n{") == ""
    assert c.closed and c.update("  Let me look <tool_call>\n{...}</tool_call> more") == ""
    assert c.rest("Let me look <tool_call>\n{...}</tool_call> more") == " <tool_call>\n{...}</tool_call> more"


def test_content_stops_before_a_stop_string_even_one_still_arriving():
    c = ContentStream(stop=("END",))
    assert c.update("done E") == "done"
    assert c.update("done EN") == ""
    assert c.update("done END and more") == ""
    assert c.rest("done") == ""


def test_an_incomplete_character_is_not_sent():
    c = ContentStream()
    assert c.update("caf\ufffd") == "caf"
    assert c.update("café") == "é"


def test_what_was_sent_is_never_sent_again_when_the_final_content_disagrees():
    c = ContentStream()
    c.update("hello world")
    assert c.rest(None) == "" and c.rest("hello world!") == "!"


# -- over HTTP ------------------------------------------------------------------------------------------------------

def events_of(r) -> list:
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    out = []
    for block in r.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: ")
            payload = block[len("data: "):]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def streamed(events: list, index: int = 0) -> tuple[str, dict]:
    """(the content a client assembles for sample `index`, its last chunk's choice)."""
    text, last = "", None
    for e in events:
        if e == "[DONE]":
            continue
        for c in e["choices"]:
            if c["index"] == index:
                text += c["delta"].get("content") or ""
                if c["finish_reason"] is not None:
                    last = c
    return text, last


@pytest.fixture
def client():
    gw, events, loader = gateway(reply="  The fix is in a.py.  ")
    with TestClient(create_app(gw, poll=False)) as c:
        yield c, gw, events, loader


def test_a_streamed_answer_ends_with_done_and_equals_the_non_streamed_one(client):
    c, gw, events, loader = client
    plain = c.post("/v1/chat/completions", json={**BODY, "seed": 5}).json()
    chunks = events_of(c.post("/v1/chat/completions",
                              json={**BODY, "seed": 5, "stream": True, "stream_options": {"include_usage": True}}))
    assert chunks[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(e["object"] == "chat.completion.chunk" for e in chunks[:-1])
    text, last = streamed(chunks)
    assert text == plain["choices"][0]["message"]["content"] == "The fix is in a.py."
    assert last["finish_reason"] == "stop" and last["response_kind"] == "answer"
    assert last["logprobs"]["content"] == plain["choices"][0]["logprobs"]["content"]
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"] == plain["usage"]
    assert len(events) == 2 and not events[1].cut_short
    a, b = events
    assert (a.completion_token_ids, a.behaviour_logprobs, a.prompt_token_ids) == \
        (b.completion_token_ids, b.behaviour_logprobs, b.prompt_token_ids)
    assert gw.counts["served"] == 2


def test_without_include_usage_there_is_no_usage_chunk(client):
    c, *_ = client
    chunks = events_of(c.post("/v1/chat/completions", json={**BODY, "stream": True}))
    assert all(e == "[DONE]" or e["choices"] for e in chunks)


def test_streamed_tool_calls_arrive_whole_in_the_last_chunk():
    gw, events, _ = gateway(reply=EDIT.text())
    with TestClient(create_app(gw, poll=False)) as c:
        chunks = events_of(c.post("/v1/chat/completions", json={**BODY, "stream": True}))
    text, last = streamed(chunks)
    assert text == "" and last["finish_reason"] == "tool_calls" and last["response_kind"] == "edit"
    (call,) = last["delta"]["tool_calls"]
    assert call["index"] == 0 and call["function"]["name"] == "edit_file"
    assert json.loads(call["function"]["arguments"]) == EDIT.arguments
    assert [r["status"] for r in last["tool_call_records"]] == ["ok"] and events[0].response_kind.value == "edit"


def test_a_streamed_group_finishes_every_sample_and_logs_one_trajectory_each():
    gw, events, loader = gateway()
    with TestClient(create_app(gw, poll=False)) as c:
        loader.engines[0].reply_for = loader.engines[1].reply_for = lambda i: f"sample {i}"
        chunks = events_of(c.post("/v1/chat/completions", json={**BODY, "stream": True, "n": 3,
                                                                 "metadata": {"request_id": "g1"}}))
    for i in range(3):
        text, last = streamed(chunks, i)
        assert text == f"sample {i}" and last["request_id"] == f"g1-{i}"
    assert sorted(e.request_id for e in events) == ["g1-0", "g1-1", "g1-2"] and {e.group_id for e in events} == {"g1"}


def test_a_stop_string_ends_the_streamed_and_the_plain_answer_alike(client):
    c, gw, events, _ = client
    plain = c.post("/v1/chat/completions", json={**BODY, "stop": ["a.py"]}).json()
    text, last = streamed(events_of(c.post("/v1/chat/completions", json={**BODY, "stop": ["a.py"], "stream": True})))
    assert text == plain["choices"][0]["message"]["content"] == "The fix is in"
    assert events[0].completion_token_ids == events[1].completion_token_ids


def test_a_bad_streamed_request_is_still_a_plain_400(client):
    c, gw, *_ = client
    r = c.post("/v1/chat/completions", json={**BODY, "stream": True, "n": 99})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


async def _drive(app, body: dict, disconnect_after: int) -> list[dict]:
    """Call the ASGI app as a server would, and disconnect once `disconnect_after` body chunks arrived."""
    sent: list[dict] = []
    enough = asyncio.Event()
    requested = False

    async def receive():
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await enough.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if sum(m["type"] == "http.response.body" for m in sent) >= disconnect_after:
            enough.set()

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 18300)}
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return sent


def test_a_client_that_disconnects_mid_stream_still_yields_a_trajectory_marked_cut_short():
    gw, events, loader = gateway(reply="x" * 200)
    in_flight_at_end: list[int] = []

    async def run():
        await gw.start(poll=False)
        for e in loader.engines:
            e.step_s = 0.005
        try:
            await _drive(create_app(gw, poll=False), {**BODY, "stream": True}, disconnect_after=3)
            in_flight_at_end.extend(e["in_flight"] for e in gw.fleet.status()["engines"])
        finally:
            await gw.close()

    asyncio.run(run())
    (t,) = events
    assert t.cut_short and 0 < t.completion_tokens < 200 and len(t.behaviour_logprobs) == t.completion_tokens
    assert gw.counts["streams_cut_short"] == 1
    assert in_flight_at_end == [0, 0]  # the engine's lease was released
