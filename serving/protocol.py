"""The gateway's request and response contract, as pure functions (no vLLM, no I/O), so it is unit-tested alone.

Request: an OpenAI chat-completions body, as the official client and editor/agent clients send it.
  * `messages` (required); roles system/developer/user/assistant/tool; assistant `tool_calls` are sent back.
  * `user`: the pseudonymous user id that picks the A/B arm. Optional: when absent, the gateway's `Caller` (the
    configured user header, else the authenticated key's client id) names the user; with neither, 400 on `user`.
  * `stream`, `stream_options.include_usage`: server-sent chunks (serving.streaming).
  * `n` (1-16): a group of samples of one prompt; each sample is its own trajectory with its own request id
    (`<request_id>-<i>`) and a shared `group_id` (the trainer's group baseline).
  * `temperature` (0-2), `top_p` (0-1], `seed`, `stop` (up to 4 strings), `max_completion_tokens` / `max_tokens`,
    `logprobs`, `top_logprobs` (0-20): honoured. The log-probs recorded for training are those of the distribution
    actually sampled (vLLM's processed log-probs), and the trajectory records temperature and top_p. Defaults:
    `serving.temperature`, top_p 1, untruncated (the distribution training traffic should come from).
  * `tools`, `tool_choice`: passed to the checkpoint's chat template; calls are validated against the offered
    tools' JSON Schemas (`schemas.tool_protocol.ToolSet`); a request with no tools is parsed against the built-in
    five. Responses are parsed, and the assistant `tool_calls` a conversation sends back are written, in the served
    checkpoint's tool-call format (`serving.tool_format`, schemas/tool_formats.py; `ChatRequest.use_tool_format`). `tool_choice` "none" offers none (any call is broken), {"function": {"name": N}} offers only N.
  * `metadata` (OpenAI's free-form object) may carry `session_id`, `workspace_id`, `org_id`, `request_id`,
    `task_id` (a background agent task's id: its `task_outcome` event rewards every request of the task),
    `privacy_mode`, `client_version` and `event_time` (ISO 8601 with a zone: the simulated clock of
    docs/simulator.md; default now). An `org_id` other than the key's org is refused (403); an `event_time`
    further from the receipt time than the configured skew is replaced by the receipt time and counted.
Anything else a client sends (parallel_tool_calls, response_format {"type": "text"}, ...) is ignored.

Response: OpenAI's `chat.completion` with `logprobs.content` (each sampled token's log-prob, and `top_logprobs`
alternatives when asked) plus rtrl's top-level `policy_version`, `arm`, `request_id`, `response_kind` and
`tool_call_records` (of the first choice; every choice carries its own `request_id`, `response_kind` and
`tool_call_records`). Valid tool calls become `message.tool_calls` and `finish_reason: "tool_calls"`.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from schemas.chat_format import to_text_messages
from schemas.envelope import SAFE_ID
from schemas.events import Trajectory
from schemas.tool_formats import ToolFormat, detect, get_format
from schemas.tool_protocol import ParsedResponse, ToolCall, ToolSet, to_openai_tool_calls

MAX_ID = 128
CLIENT_VERSION = "rtrl-serving/0.1"
MAX_RECORDS = 256  # Trajectory.tool_calls bound
METADATA_IDS = ("session_id", "workspace_id", "org_id", "request_id", "client_version", "task_id")
MAX_N = 16
MAX_STOP = 4
MAX_TOP_LOGPROBS = 20


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


@dataclass(frozen=True)
class SampleSpec:
    """What an engine is asked to sample for one request."""

    max_tokens: int
    sampling: Sampling
    seed: int | None = None
    n: int = 1
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0  # alternatives per position besides the sampled token (0: none)


@dataclass(frozen=True)
class Caller:
    """Who the server says is calling (serving.auth), never what the body asserts: the user named by the
    configured header or the authenticated key (used when the body has no `user`), and the key's org."""

    user: str | None = None
    org: str | None = None          # None or "*": the request's metadata.org_id is taken
    user_hint: str = "an API key"   # how a caller could have named the user (for the 400 that says so)


@dataclass(frozen=True)
class TimeBounds:
    """How far a request's metadata.event_time may be from the receipt time before the receipt time replaces it."""

    future_s: float = 300.0
    past_s: float = 7 * 86400.0


@dataclass
class ChatRequest:
    messages: list[dict[str, str]]   # role/content, tool calls written in `tool_format`
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
    n: int = 1
    temperature: float | None = None   # None: the server's
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    stream: bool = False
    include_usage: bool = False
    tools: ToolSet | None = None              # the calls' validation set (None: the built-in five)
    template_tools: list[dict] | None = None  # what the chat template is given
    event_time_clamped: bool = False
    task_id: str | None = None                # the background task this request works on (metadata.task_id)
    tool_format: str = "hermes"               # how `messages` write the calls sent back and responses are parsed
    sent_calls: list[tuple[int, str, list[ToolCall]]] = field(default_factory=list)  # (message index, its text
    #                                           without calls, its calls): the assistant calls the client sent back

    @property
    def format(self) -> ToolFormat:
        return get_format(self.tool_format)

    def use_tool_format(self, name: str) -> None:
        """Write the assistant calls sent back in format `name` (the served checkpoint's) and parse in it."""
        if name == self.tool_format:
            return
        fmt = get_format(name)
        for i, text, calls in self.sent_calls:
            written = "\n".join(([text] if text else []) + [fmt.render(calls)])
            self.messages[i] = {**self.messages[i], "content": written}
        self.tool_format = name

    def parse(self, text: str) -> ParsedResponse:
        """A sample's text parsed in the request's tool-call format against its tools."""
        return self.format.parse(text, self.tools)

    def spec(self, max_tokens: int, default_temperature: float) -> SampleSpec:
        t = default_temperature if self.temperature is None else self.temperature
        return SampleSpec(max_tokens=max_tokens, sampling=Sampling(temperature=t, top_p=self.top_p),
                          seed=self.seed, n=self.n, stop=self.stop, top_logprobs=self.top_logprobs)

    def sample_id(self, index: int) -> str:
        """The request id of sample `index`: the request's own for one sample, `<id>-<i>` in a group."""
        return self.request_id if self.n == 1 else f"{self.request_id}-{index}"


@dataclass
class Generation:
    """What an engine sampled: token ids, each one's log-prob and text, the whole text (eos excluded)."""

    token_ids: list[int]
    logprobs: list[float]
    tokens: list[str]
    text: str
    finish_reason: str  # "stop" (eos / stop token / stop string) or "length"
    top_logprobs: list[list[tuple[str, float]]] = field(default_factory=list)  # per token, when asked
    index: int = 0
    cut_short: bool = False  # a stream whose client left: what was sampled by then


@dataclass
class Delta:
    """One step of a streamed sample: its new tokens, their log-probs and asked alternatives (token id, log-prob);
    `finish_reason` on the sample's last step."""

    index: int
    token_ids: list[int]
    logprobs: list[float]
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """`text` before the first of the stop strings (as vLLM cuts it); unchanged without one."""
    cuts = [i for i in (text.find(x) for x in stop) if i >= 0]
    return text[:min(cuts)] if cuts else text


@dataclass
class Served:
    """Everything known about one served request, for the response and the trajectory events."""

    request: ChatRequest
    arm: str
    policy_version: str
    model: str
    prompt_token_ids: list[int]
    generations: list[Generation]
    parsed: list[ParsedResponse]
    sampling: Sampling
    latency_ms: float
    created: int = field(default_factory=lambda: int(datetime.now(timezone.utc).timestamp()))


def _id(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RequestError(f"{name} must be a non-empty string", name)
    if len(value) > MAX_ID:
        raise RequestError(f"{name} must be at most {MAX_ID} characters (got {len(value)})", name)
    if not re.fullmatch(SAFE_ID, value):
        raise RequestError(f"{name} must be visible ASCII characters without spaces (an id: it keys the A/B arm, "
                           "Kafka and the stores)", name)
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


def _float(body: dict, name: str, lo: float, hi: float, lo_open: bool = False) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestError(f"{name} must be a number", name)
    if value < lo or value > hi or (lo_open and value == lo):
        raise RequestError(f"{name} must be in {'(' if lo_open else '['}{lo:g}, {hi:g}] (got {value})", name)
    return float(value)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > MAX_STOP or \
            not all(isinstance(x, str) and 0 < len(x) <= 256 for x in stops):
        raise RequestError(f"stop must be a string or a list of at most {MAX_STOP} non-empty strings of at most "
                           "256 characters", "stop")
    return tuple(stops)


def _sent_calls(messages: list[dict]) -> list[tuple[int, str, list[ToolCall]]]:
    """The assistant messages that send calls back: (index, their text without the calls, the calls)."""
    out = []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                fn = tc["function"] if isinstance(tc, dict) else tc.function
                name, args = (fn["name"], fn["arguments"]) if isinstance(fn, dict) else (fn.name, fn.arguments)
                calls.append(ToolCall(name, json.loads(args) if isinstance(args, str) else args))
            without = to_text_messages([{**m, "tool_calls": None}])[0]["content"]
            out.append((i, without, calls))
    return out


def tool_format_of(setting: str, chat_template: str | None) -> str:
    """The tool-call format a served checkpoint speaks: `serving.tool_format`, or for "auto" the one its chat
    template shows (Hermes when it shows none)."""
    return detect(chat_template) if setting == "auto" else get_format(setting).name


def _messages(body: dict) -> tuple[list[dict[str, str]], list[tuple[int, str, list[ToolCall]]]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RequestError(f"messages[{i}] must be an object", f"messages[{i}]")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RequestError(f"messages[{i}].content must be a string or a list of parts", f"messages[{i}].content")
        if m.get("role") == "developer":  # OpenAI's newer name for the system role
            messages[i] = {**m, "role": "system"}
    try:
        text = to_text_messages(messages)
        return text, _sent_calls(messages)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise RequestError(f"messages: {e}", "messages") from None


def _tools(body: dict) -> tuple[ToolSet | None, list[dict] | None]:
    """(the set calls are validated against, the tools given to the chat template)."""
    offered = body.get("tools")
    choice = body.get("tool_choice")
    if offered is None or offered == []:
        if choice not in (None, "none", "auto"):
            raise RequestError("tool_choice names a tool but the request offers no tools", "tool_choice")
        return (ToolSet({}), None) if choice == "none" else (None, None)
    try:
        tools = ToolSet.from_openai(offered)
    except ValueError as e:
        param = str(e).split(":", 1)[0]
        raise RequestError(str(e), param) from None
    if choice in (None, "auto", "required"):
        return tools, list(offered)
    if choice == "none":
        return ToolSet({}), None
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) and \
        isinstance(choice.get("function"), dict) else None
    if not isinstance(name, str):
        raise RequestError('tool_choice must be "none", "auto", "required" or {"type": "function", "function": '
                           '{"name": ...}}', "tool_choice")
    if name not in tools.schemas:
        raise RequestError(f"tool_choice names {name!r}, which the request's tools do not offer", "tool_choice")
    return tools.only(name), [t for t in offered if t["function"]["name"] == name]


def _user(body: dict, caller: Caller) -> str:
    if body.get("user") is not None:
        return _id(body["user"], "user")
    if caller.user:
        return caller.user
    raise RequestError(f"user: the request names no user; send `user` (the pseudonymous user id that assigns the "
                       f"A/B arm) or {caller.user_hint}", "user")


def _org(meta: dict, ids: dict, caller: Caller) -> str:
    if caller.org and caller.org != "*":
        if ids.get("org_id") not in (None, caller.org):
            raise RequestError(f"metadata.org_id {ids['org_id']!r} is not the org of your API key", "metadata.org_id",
                               403, "permission_error")
        return caller.org
    return ids.get("org_id") or "unknown"


def _event_time(meta: dict, now: datetime, bounds: TimeBounds) -> tuple[datetime, bool]:
    t = _time(meta.get("event_time"), "metadata.event_time", now)
    if t > now + timedelta(seconds=bounds.future_s) or t < now - timedelta(seconds=bounds.past_s):
        return now, True
    return t, False


def parse_request(body: Any, *, default_max_tokens: int, max_model_len: int, now: datetime | None = None,
                  caller: Caller = Caller(), time_bounds: TimeBounds = TimeBounds()) -> ChatRequest:
    """Validate an OpenAI chat-completions body; `RequestError` (400, 403 for another org) says what is wrong and
    where."""
    now = now or datetime.now(timezone.utc)
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise RequestError('stream_options must be {"include_usage": true|false}', "stream_options")
    n = _int(body, "n", 1, MAX_N) or 1
    logprobs = body.get("logprobs") or False
    if not isinstance(logprobs, bool):
        raise RequestError("logprobs must be a boolean", "logprobs")
    top_logprobs = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS) or 0
    user = _user(body, caller)
    text_messages, sent_calls = _messages(body)
    tools, template_tools = _tools(body)
    meta = body.get("metadata") or {}
    if not isinstance(meta, dict):
        raise RequestError("metadata must be an object", "metadata")
    ids = {k: _id(meta[k], f"metadata.{k}") for k in METADATA_IDS if meta.get(k) is not None}
    max_tokens = _int(body, "max_completion_tokens", 1, max_model_len)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1, max_model_len)
    event_time, clamped = _event_time(meta, now, time_bounds)
    request_id = ids.get("request_id") or uuid.uuid4().hex
    return ChatRequest(
        messages=text_messages, user_id=user, request_id=request_id,
        session_id=ids.get("session_id") or request_id,  # no session: a session of one request
        workspace_id=ids.get("workspace_id") or "unknown", org_id=_org(meta, ids, caller),
        client_version=ids.get("client_version") or CLIENT_VERSION,
        privacy_mode=_bool(meta["privacy_mode"], "metadata.privacy_mode") if "privacy_mode" in meta else False,
        event_time=event_time, event_time_clamped=clamped, task_id=ids.get("task_id"),
        max_tokens=max_tokens or default_max_tokens, seed=_int(body, "seed", 0, 2**63 - 1), n=n,
        temperature=_float(body, "temperature", 0.0, 2.0), top_p=_float(body, "top_p", 0.0, 1.0, lo_open=True) or 1.0,
        stop=_stop(body.get("stop")), logprobs=logprobs or top_logprobs > 0, top_logprobs=top_logprobs,
        stream=stream, include_usage=stream and bool(options.get("include_usage")), tools=tools,
        template_tools=template_tools, sent_calls=sent_calls)


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


def final_content(g: Generation, p: ParsedResponse) -> str | None:
    """The message content of a sample: its text without the outer whitespace, which for a response that only
    calls tools is empty, and then None. A response with a broken call shows the model's text as it was written
    (its valid calls are still `tool_calls`). Streaming sends prefixes of this (serving.streaming)."""
    content = g.text.strip() if p.broken else p.content
    return None if p.calls and not content else content


def token_logprobs(g: Generation) -> list[dict]:
    """OpenAI's `logprobs.content` of a sample: each token, its behaviour log-prob and the asked alternatives."""
    out = []
    for i, (t, lp) in enumerate(zip(g.tokens, g.logprobs)):
        top = g.top_logprobs[i] if i < len(g.top_logprobs) else []
        out.append({"token": t, "logprob": behaviour_logprob(lp), "bytes": list(t.encode("utf-8")),
                    "top_logprobs": [{"token": a, "logprob": behaviour_logprob(b), "bytes": list(a.encode("utf-8"))}
                                     for a, b in top]})
    return out


def choice_extras(s: Served, i: int) -> dict:
    """rtrl's fields of one choice: its own request id (what the client reports outcomes against), its kind and
    every tool call with the parser's verdict."""
    p = s.parsed[i]
    return {"request_id": s.request.sample_id(i), "response_kind": p.kind.value,
            "tool_call_records": [r.model_dump(mode="json") for r in p.records]}


def finish_reason(g: Generation, p: ParsedResponse) -> str:
    return "tool_calls" if p.calls else g.finish_reason


def tool_calls_of(s: Served, i: int) -> list[dict]:
    p = s.parsed[i]
    return to_openai_tool_calls(p.calls, s.request.sample_id(i)) if p.calls else []


def usage(s: Served) -> dict:
    completion = sum(len(g.token_ids) for g in s.generations)
    return {"prompt_tokens": len(s.prompt_token_ids), "completion_tokens": completion,
            "total_tokens": len(s.prompt_token_ids) + completion}


def build_response(s: Served) -> dict:
    """The OpenAI `chat.completion` body (plus rtrl's top-level fields) for a served request."""
    choices = []
    for i, (g, p) in enumerate(zip(s.generations, s.parsed)):
        message: dict[str, Any] = {"role": "assistant", "content": final_content(g, p)}
        if calls := tool_calls_of(s, i):
            message["tool_calls"] = calls
        choices.append({"index": i, "message": message, "logprobs": {"content": token_logprobs(g)},
                        "finish_reason": finish_reason(g, p), **choice_extras(s, i)})
    first = choice_extras(s, 0)
    return {
        "id": f"chatcmpl-{s.request.request_id}", "object": "chat.completion", "created": s.created,
        "model": s.model, "choices": choices, "usage": usage(s),
        "policy_version": s.policy_version, "arm": s.arm, "request_id": s.request.request_id,
        "response_kind": first["response_kind"], "tool_call_records": first["tool_call_records"],
        "sampling": {"temperature": s.sampling.temperature, "top_p": s.sampling.top_p, "top_k": s.sampling.top_k},
    }


def _behaviour(logprobs: list[float], sampling: Sampling) -> list[float]:
    """The log-probs of the distribution each token was drawn from: at temperature 0 (greedy) that distribution
    is a point mass, so every token had probability 1, whatever log-probs the engine reports for it."""
    if sampling.temperature == 0:
        return [0.0] * len(logprobs)
    return [behaviour_logprob(x) for x in logprobs]


def build_trajectories(s: Served) -> list[Trajectory]:
    """One trajectory event per sample (privacy mode: no token ids or logprobs); the samples of a group share
    `group_id` (the request's id)."""
    r = s.request
    private = r.privacy_mode
    out = []
    for i, (g, p) in enumerate(zip(s.generations, s.parsed)):
        out.append(Trajectory(
            event_id=Trajectory.new_id(), event_time=r.event_time, user_id=r.user_id, org_id=r.org_id,
            workspace_id=r.workspace_id, session_id=r.session_id, privacy_mode=private,
            client_version=r.client_version, request_id=r.sample_id(i), policy_version=s.policy_version, arm=s.arm,
            prompt_token_ids=[] if private else list(s.prompt_token_ids),
            completion_token_ids=[] if private else list(g.token_ids),
            behaviour_logprobs=[] if private else _behaviour(g.logprobs, s.sampling),
            tool_calls=list(p.records)[:MAX_RECORDS], latency_ms=max(0.0, s.latency_ms),
            prompt_tokens=len(s.prompt_token_ids), completion_tokens=len(g.token_ids),
            temperature=s.sampling.temperature, top_p=s.sampling.top_p, top_k=s.sampling.top_k,
            response_kind=p.kind, group_id=r.request_id if r.n > 1 else None, cut_short=g.cut_short,
            task_id=r.task_id))
    return out
