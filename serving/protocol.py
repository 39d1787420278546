"""The gateway's request and response contract, as pure functions (no vLLM, no I/O), so it is unit-tested alone.

Request: an OpenAI chat-completions body. Required: `messages` and `user` (the pseudonymous user id that picks
the A/B arm). Optional `metadata` (OpenAI's free-form object) may carry `session_id`, `workspace_id`, `org_id`,
`request_id`, `privacy_mode`, `client_version` and `event_time` (ISO 8601 with a zone: the simulated clock of
docs/simulator.md; default now). `max_tokens` / `max_completion_tokens` and `seed` are honoured. The sampling
distribution is the server's (`serving.temperature`, top_p 1, untruncated top_k), the one training traffic must
come from: a request's `temperature`/`top_p` are ignored, and the response and the trajectory say what was used.
Refused with 400: `stream: true`, `n` > 1, `top_logprobs` > 0, a missing `user`, malformed messages or metadata.

Response: OpenAI's `chat.completion` with `logprobs.content` (the sampled tokens and their log-probs) plus
top-level `policy_version`, `arm`, `request_id`, `response_kind` and `tool_call_records` (every call, broken ones
with the parser's reason). Valid tool calls become `message.tool_calls` and `finish_reason: "tool_calls"`.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from schemas.chat_format import to_text_messages
from schemas.events import Trajectory
from schemas.tool_protocol import ParsedResponse, to_openai_tool_calls

MAX_ID = 128
CLIENT_VERSION = "rtrl-serving/0.1"
MAX_RECORDS = 256  # Trajectory.tool_calls bound
METADATA_IDS = ("session_id", "workspace_id", "org_id", "request_id", "client_version")


class RequestError(ValueError):
    """A request the gateway refuses: HTTP `status`, OpenAI error `type`, the offending `param`."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 type: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status, self.type = message, param, status, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": None}}


@dataclass(frozen=True)
class Sampling:
    """The distribution a completion is sampled from (and its behaviour logprobs describe)."""

    temperature: float
    top_p: float = 1.0
    top_k: int = -1


@dataclass
class ChatRequest:
    messages: list[dict[str, str]]   # role/content, tool calls already in protocol text
    user_id: str
    request_id: str
    session_id: str
    workspace_id: str
    org_id: str
    client_version: str
    privacy_mode: bool
    event_time: datetime
    max_tokens: int
    seed: int | None = None


@dataclass
class Generation:
    """What an engine sampled: token ids, each one's log-prob and text, the whole text (eos excluded)."""

    token_ids: list[int]
    logprobs: list[float]
    tokens: list[str]
    text: str
    finish_reason: str  # "stop" (eos / stop token) or "length"


@dataclass
class Served:
    """Everything known about one served request, for the response and the trajectory event."""

    request: ChatRequest
    arm: str
    policy_version: str
    model: str
    prompt_token_ids: list[int]
    generation: Generation
    parsed: ParsedResponse
    sampling: Sampling
    latency_ms: float
    created: int = field(default_factory=lambda: int(datetime.now(timezone.utc).timestamp()))


def _id(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RequestError(f"{name} must be a non-empty string", name)
    if len(value) > MAX_ID:
        raise RequestError(f"{name} must be at most {MAX_ID} characters (got {len(value)})", name)
    return value


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):  # OpenAI metadata values are strings
        return value.lower() in ("true", "1")
    raise RequestError(f"{name} must be a boolean (or 'true'/'false')", name)


def _time(value: Any, name: str, now: datetime) -> datetime:
    if value is None:
        return now
    if not isinstance(value, str):
        raise RequestError(f"{name} must be an ISO 8601 string with a timezone", name)
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise RequestError(f"{name}: {value!r} is not an ISO 8601 time", name) from None
    if t.tzinfo is None:
        raise RequestError(f"{name} must carry a timezone, e.g. 2026-11-01T12:00:00Z", name)
    return t.astimezone(timezone.utc)


def _int(body: dict, name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be an integer", name)
    if value < lo or (hi is not None and value > hi):
        raise RequestError(f"{name} must be in [{lo}, {hi if hi is not None else 'inf'}] (got {value})", name)
    return value


def parse_request(body: Any, *, default_max_tokens: int, max_model_len: int,
                  now: datetime | None = None) -> ChatRequest:
    """Validate an OpenAI chat-completions body; `RequestError` (400) says what is wrong and where."""
    now = now or datetime.now(timezone.utc)
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if body.get("stream"):
        raise RequestError("streaming is not supported by this endpoint; send \"stream\": false", "stream")
    if (n := _int(body, "n", 1)) is not None and n != 1:
        raise RequestError("n must be 1 (one completion per request)", "n")
    if _int(body, "top_logprobs", 0, 20):
        raise RequestError("top_logprobs is not supported; logprobs.content always carries the sampled token's "
                           "log-prob", "top_logprobs")
    if "user" not in body:
        raise RequestError("user is required: the pseudonymous user id that assigns the A/B arm", "user")
    user = _id(body["user"], "user")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestError(f"messages[{i}] must be an object", f"messages[{i}]")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RequestError(f"messages[{i}].content must be a string or a list of parts", f"messages[{i}].content")
    try:
        text_messages = to_text_messages(messages)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise RequestError(f"messages: {e}", "messages") from None
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        raise RequestError("metadata must be an object", "metadata")
    ids = {k: _id(meta[k], f"metadata.{k}") for k in METADATA_IDS if meta.get(k) is not None}
    max_tokens = _int(body, "max_completion_tokens", 1, max_model_len)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1, max_model_len)
    request_id = ids.get("request_id") or uuid.uuid4().hex
    return ChatRequest(
        messages=text_messages, user_id=user, request_id=request_id,
        session_id=ids.get("session_id") or request_id,  # no session: a session of one request
        workspace_id=ids.get("workspace_id") or "unknown", org_id=ids.get("org_id") or "unknown",
        client_version=ids.get("client_version") or CLIENT_VERSION,
        privacy_mode=_bool(meta["privacy_mode"], "metadata.privacy_mode") if "privacy_mode" in meta else False,
        event_time=_time(meta.get("event_time"), "metadata.event_time", now),
        max_tokens=max_tokens or default_max_tokens, seed=_int(body, "seed", 0, 2**63 - 1))


def fit_max_tokens(prompt_len: int, max_tokens: int, max_model_len: int) -> int:
    """The completion budget that fits the context window; RequestError when the prompt alone does not fit."""
    if prompt_len >= max_model_len:
        raise RequestError(f"the prompt is {prompt_len} tokens; this model's context is {max_model_len} tokens",
                           "messages")
    return min(max_tokens, max_model_len - prompt_len)


def behaviour_logprob(value: float) -> float:
    """A log-prob as the trajectory schema takes it: finite and <= 0 (rounding can give +1e-8)."""
    if math.isnan(value):
        return -1e9
    return max(min(float(value), 0.0), -1e9)


def build_response(s: Served) -> dict:
    """The OpenAI `chat.completion` body (plus rtrl's top-level fields) for a served request."""
    g, p = s.generation, s.parsed
    tool_calls = to_openai_tool_calls(p.calls, s.request.request_id) if p.calls else []
    # Broken calls: the client sees exactly what the model wrote; else the text outside the call blocks.
    content: str | None = g.text if p.broken else p.content
    if tool_calls and not content:
        content = None
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    logprobs = [{"token": t, "logprob": behaviour_logprob(lp), "bytes": list(t.encode("utf-8")), "top_logprobs": []}
                for t, lp in zip(g.tokens, g.logprobs)]
    return {
        "id": f"chatcmpl-{s.request.request_id}", "object": "chat.completion", "created": s.created,
        "model": s.model,
        "choices": [{"index": 0, "message": message, "logprobs": {"content": logprobs},
                     "finish_reason": "tool_calls" if tool_calls else g.finish_reason}],
        "usage": {"prompt_tokens": len(s.prompt_token_ids), "completion_tokens": len(g.token_ids),
                  "total_tokens": len(s.prompt_token_ids) + len(g.token_ids)},
        "policy_version": s.policy_version, "arm": s.arm, "request_id": s.request.request_id,
        "response_kind": p.kind.value,
        "tool_call_records": [r.model_dump(mode="json") for r in p.records],
        "sampling": {"temperature": s.sampling.temperature, "top_p": s.sampling.top_p, "top_k": s.sampling.top_k},
    }


def build_trajectory(s: Served) -> Trajectory:
    """The trajectory event of a served request (privacy mode: no token ids or logprobs)."""
    r, g = s.request, s.generation
    private = r.privacy_mode
    return Trajectory(
        event_id=Trajectory.new_id(), event_time=r.event_time, user_id=r.user_id, org_id=r.org_id,
        workspace_id=r.workspace_id, session_id=r.session_id, privacy_mode=private,
        client_version=r.client_version, request_id=r.request_id, policy_version=s.policy_version, arm=s.arm,
        prompt_token_ids=[] if private else list(s.prompt_token_ids),
        completion_token_ids=[] if private else list(g.token_ids),
        behaviour_logprobs=[] if private else [behaviour_logprob(x) for x in g.logprobs],
        tool_calls=list(s.parsed.records)[:MAX_RECORDS], latency_ms=max(0.0, s.latency_ms),
        prompt_tokens=len(s.prompt_token_ids), completion_tokens=len(g.token_ids),
        temperature=s.sampling.temperature, top_p=s.sampling.top_p, top_k=s.sampling.top_k,
        response_kind=s.parsed.kind)
