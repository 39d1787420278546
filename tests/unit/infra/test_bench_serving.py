"""`rtrl bench serving`'s streaming load: how many clients stream, how a streamed answer read through the official
openai client is judged (complete, refused, erroring, cut off) and its time to first token, and the per-kind
summary. The streams are served by an httpx mock transport (no server)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from infra.bench.serving import StreamTally, by_kind, stream_clients, streamed_request

BODY = {"model": "rtrl-policy", "user": "u", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def chunk(choices: list[dict], **extra) -> dict:
    return {"id": "chatcmpl-r1", "object": "chat.completion.chunk", "created": 0, "model": "m/v2",
            "choices": choices, "policy_version": "2", "arm": "treatment", **extra}


def delta(content: str | None = None, finish: str | None = None, index: int = 0, **more) -> dict:
    d = {} if content is None else {"content": content}
    return {"index": index, "delta": {**d, **more}, "finish_reason": finish}


ROLE = chunk([delta("", role="assistant")])
USAGE = chunk([], usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8})
COMPLETE = [ROLE, chunk([delta("Hel")]), chunk([delta("lo")]), chunk([delta(None, "stop")]), USAGE]


def sse(chunks: list[dict], done: bool = True) -> bytes:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return (body + ("data: [DONE]\n\n" if done else "")).encode()


def client_for(handler):
    import openai

    return openai.OpenAI(base_url="http://gateway.invalid/v1", api_key="bench", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def serving(payload: bytes, status: int = 200, seen: list | None = None):
    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(json.loads(request.content))
        return httpx.Response(status, content=payload, headers={"content-type": "text/event-stream" if status == 200
                                                                else "application/json"})
    return handler


class Clock:
    """1 ms per reading."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


@pytest.mark.parametrize("clients, share, expected", [(8, 0.5, 4), (8, 0.0, 0), (8, 1.0, 8), (3, 0.5, 2),
                                                       (8, 0.01, 1), (1, 0.5, 1), (0, 0.5, 0)])
def test_the_share_of_streaming_clients_is_rounded_and_never_loses_a_nonzero_share(clients, share, expected):
    assert stream_clients(clients, share) == expected


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_a_share_outside_0_1_is_refused(share):
    with pytest.raises(ValueError, match="stream_share"):
        stream_clients(8, share)


def test_a_complete_stream_is_ok_with_its_ttft_version_and_arm_and_asks_for_usage():
    seen: list[dict] = []
    rec = streamed_request(client_for(serving(sse(COMPLETE), seen=seen)), BODY, clock=Clock())
    assert rec["status"] == 200 and "error" not in rec and rec["stream"] is True
    assert (rec["version"], rec["arm"]) == ("2", "treatment")
    # clock: start at 1 ms, one reading per chunk; the role chunk carries no token, "Hel" (2nd chunk) does
    assert rec["ttft_ms"] == pytest.approx(2.0)
    assert seen[0]["stream"] is True and seen[0]["stream_options"] == {"include_usage": True}
    assert seen[0]["user"] == "u"


@pytest.mark.parametrize("chunks, done, error", [
    (COMPLETE[:-2], False, "without a finish_reason"),               # cut off mid-answer
    (COMPLETE[:-1], False, "before its usage chunk"),                # cut off after the last token
    (COMPLETE[:-1], True, "before its usage chunk"),                 # [DONE] but no usage, which was asked for
    ([USAGE], True, "before any choice"),
    ([ROLE, chunk([delta("a", "stop"), delta("b", None, index=1)]), USAGE], True, r"choice\(s\) \[1\]"),  # n=2
])
def test_a_stream_that_ends_early_is_a_failed_request(chunks, done, error):
    rec = streamed_request(client_for(serving(sse(chunks, done))), BODY)
    assert rec["status"] == 0 and re.search(error, rec["error"])


def test_a_choice_that_finishes_twice_is_a_failed_request():
    twice = [ROLE, chunk([delta("a", "stop")]), chunk([delta(None, "stop")]), USAGE]
    rec = streamed_request(client_for(serving(sse(twice))), BODY)
    assert rec["status"] == 0 and "finished twice" in rec["error"]


class DroppedAfterTwoChunks(httpx.SyncByteStream):
    def __iter__(self):
        yield sse(COMPLETE[:2], done=False)
        raise httpx.ReadError("connection reset by peer")


def test_a_stream_that_errors_midway_is_a_failed_request():
    def handler(request):
        return httpx.Response(200, stream=DroppedAfterTwoChunks(), headers={"content-type": "text/event-stream"})

    rec = streamed_request(client_for(handler), BODY)
    assert rec["status"] == 0 and "APIConnectionError" in rec["error"]   # the openai client's word for it
    assert rec["version"] == "2" and rec["ttft_ms"] is not None   # it had started


def test_a_refused_stream_keeps_its_http_status():
    payload = json.dumps({"error": {"message": "max_tokens must be >= 1", "type": "invalid_request_error",
                                    "param": "max_tokens", "code": None}}).encode()
    rec = streamed_request(client_for(serving(payload, status=400)), BODY)
    assert rec["status"] == 400 and "max_tokens" in rec["error"] and rec["ttft_ms"] is None


def test_a_tool_call_counts_as_the_first_token():
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "lint", "arguments": "{}"}}
    chunks = [ROLE, chunk([delta(None, "tool_calls", tool_calls=[call])]), USAGE]
    rec = streamed_request(client_for(serving(sse(chunks))), BODY, clock=Clock())
    assert rec["status"] == 200 and rec["ttft_ms"] == pytest.approx(2.0)
    assert StreamTally(0.0).ttft_ms() is None   # no chunk: no first token


def test_by_kind_splits_counts_failures_latencies_and_ttft():
    recs = [{"stream": True, "status": 200, "latency_ms": 100.0, "ttft_ms": 10.0},
            {"stream": True, "status": 200, "latency_ms": 300.0, "ttft_ms": 30.0},
            {"stream": True, "status": 0, "latency_ms": 5.0, "ttft_ms": None, "error": "cut off"},
            {"stream": False, "status": 200, "latency_ms": 50.0},
            {"status": 503, "latency_ms": 1.0}]                       # older records carry no `stream`: not streamed
    out = by_kind(recs)
    assert out["streamed"] == {"requests": 3, "failed": 1, "p50_latency_ms": 300.0, "p95_latency_ms": 300.0,
                               "p50_ttft_ms": 30.0, "p95_ttft_ms": 30.0}
    assert out["non_streamed"] == {"requests": 2, "failed": 1, "p50_latency_ms": 50.0, "p95_latency_ms": 50.0}
    assert json.loads(json.dumps(by_kind([]))) == {
        "streamed": {"requests": 0, "failed": 0, "p50_latency_ms": None, "p95_latency_ms": None,
                     "p50_ttft_ms": None, "p95_ttft_ms": None},
        "non_streamed": {"requests": 0, "failed": 0, "p50_latency_ms": None, "p95_latency_ms": None}}
