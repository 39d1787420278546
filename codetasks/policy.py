"""The policy the simulated users talk to: a small protocol, the real path (any OpenAI-compatible endpoint through
the official `openai` client) and a deterministic in-process reference for tests.

    reply = policy.respond(PolicyRequest(messages, user, metadata, task))

`metadata` is what a client sends beside the chat (`extra_body={"metadata": ...}`): session_id, workspace_id,
org_id, event_time (ISO, the simulated clock), privacy_mode. Serving logs the trajectory under the same ids and
answers with `request_id`, `policy_version`, `arm` (extra top-level fields of the chat completion), valid tool
calls as OpenAI `tool_calls`, text in `content`, and `response_kind` / `tool_call_records` (every call, broken
ones included, as serving's strict parser judged them). `task` is the simulator's ground truth: it never leaves
the process, and only the reference policy looks at it.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from codetasks.tasks import Task
from schemas.events import ResponseKind, ToolCallRecord, ToolCallStatus
from schemas.tool_protocol import ParsedResponse, ToolCall, from_openai_tool_calls, openai_tools, parse_response


class PolicyError(RuntimeError):
    """The call failed (endpoint down, timeout, an HTTP error); the request has no outcome. `status` is the HTTP
    status when the endpoint answered one (a 400 is the request's fault, e.g. a conversation past the context)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class PolicyRequest:
    messages: list[dict[str, str]]
    user: str
    metadata: dict[str, Any]
    task: Task | None = None
    seed: int | None = None         # the sampling seed (the eval gives both arms the same one)


@dataclass
class PolicyReply:
    request_id: str
    parsed: ParsedResponse
    text: str                       # the response as the model wrote it (protocol text: content + tool calls)
    policy_version: str = ""
    arm: str = ""
    completion_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def kind(self) -> ResponseKind:
        return self.parsed.kind


class Policy(Protocol):
    def respond(self, request: PolicyRequest) -> PolicyReply: ...


def response_text(parsed: ParsedResponse) -> str:
    """The assistant turn as protocol text (what goes back into the conversation on the next turn). A response
    with broken calls is what the model wrote (serving sends it whole as the content)."""
    if parsed.broken and parsed.content:
        return parsed.content
    if parsed.calls:
        return "\n".join(c.text() for c in parsed.calls)
    return parsed.content


def parsed_from_openai(content: str | None, tool_calls: list[Any] | None, kind: str | None,
                       records: list[Any] | None) -> ParsedResponse:
    """Rebuild serving's ParsedResponse from a chat completion: valid calls from `tool_calls`, every call's record
    from `tool_call_records`, the kind from `response_kind`. Without those extra fields (a plain OpenAI server)
    the content and calls are re-parsed with the protocol's strict parser."""
    content = content or ""
    try:
        calls = from_openai_tool_calls(tool_calls or [])
    except ValueError as e:  # the client received a call that does not validate: broken
        bad = ToolCallRecord(name="", status=ToolCallStatus.validation_error, error=str(e)[:2048])
        return ParsedResponse(ResponseKind.answer, [], [bad], content)
    if kind is None or records is None:
        return parse_response("\n".join(([content] if content else []) + [c.text() for c in calls]))
    recs = [r if isinstance(r, ToolCallRecord) else ToolCallRecord.model_validate(r) for r in records]
    try:
        rkind = ResponseKind(kind)
    except ValueError:
        rkind = ResponseKind.unknown
    return ParsedResponse(rkind, calls, recs, content)


PLACEHOLDER_KEY = "rtrl-simulator"   # what the client sends without a key: no `rtrl_` prefix, so serving reads it
                                     # as no key where chat needs none (the official client always sends one)


class OpenAIPolicy:
    """Any OpenAI-compatible chat endpoint, through the official client (the real path).

    `api_key`: sent as `Authorization: Bearer <key>` (an rtrl key where serving requires one; None or "" sends the
    placeholder). `verify`: how to check the endpoint's TLS certificate when `http_client` is not given (an
    `ssl.SSLContext` that trusts serving's own certificate, a CA bundle's path, or False); None keeps the client's
    default (the system's CAs)."""

    def __init__(self, base_url: str, model: str = "", *, api_key: str | None = PLACEHOLDER_KEY,
                 timeout_s: float = 120.0, max_retries: int = 1, http_client: Any = None, verify: Any = None):
        from openai import DefaultHttpxClient, OpenAI

        if http_client is None and verify is not None:
            http_client = DefaultHttpxClient(verify=verify)
        self.base_url = base_url
        self.client = OpenAI(base_url=base_url, api_key=api_key or PLACEHOLDER_KEY, timeout=timeout_s,
                             max_retries=max_retries, http_client=http_client)
        self.model = model

    def check(self) -> str:
        """Raise PolicyError when the endpoint does not answer; return the model name to use."""
        import openai

        try:
            models = [m.id for m in self.client.with_options(max_retries=0, timeout=10.0).models.list()]
        except openai.APIConnectionError as e:
            raise PolicyError(f"the policy endpoint {self.base_url} is not reachable: {e}") from None
        except openai.NotFoundError:  # no /models route: the chat route may still work
            models = []
        except openai.APIError as e:
            raise PolicyError(f"the policy endpoint {self.base_url} answered an error: {e}",
                              getattr(e, "status_code", None)) from None
        if not self.model:
            self.model = models[0] if models else "default"
        return self.model

    def respond(self, request: PolicyRequest) -> PolicyReply:
        import openai

        seed = {} if request.seed is None else {"seed": request.seed}
        try:
            resp = self.client.chat.completions.create(
                model=self.model or "default", messages=request.messages, user=request.user, tools=openai_tools(),
                extra_body={"metadata": request.metadata}, **seed)
        except openai.APIError as e:
            raise PolicyError(f"{type(e).__name__}: {e}", getattr(e, "status_code", None)) from None
        extra = resp.model_extra or {}
        if not resp.choices:
            raise PolicyError("the completion has no choices")
        msg = resp.choices[0].message
        parsed = parsed_from_openai(msg.content, msg.tool_calls, extra.get("response_kind"),
                                    extra.get("tool_call_records"))
        usage = resp.usage
        return PolicyReply(request_id=str(extra.get("request_id") or resp.id), parsed=parsed,
                           text=response_text(parsed), policy_version=str(extra.get("policy_version") or ""),
                           arm=str(extra.get("arm") or ""),
                           completion_tokens=usage.completion_tokens if usage else 0,
                           prompt_tokens=usage.prompt_tokens if usage else 0)


@dataclass(frozen=True)
class ErrorRates:
    """How often the reference policy errs, per response (the rest are the task's demonstration)."""

    wrong: float = 0.0       # an edit that applies but is wrong (another value / name)
    broken: float = 0.0      # an edit_file whose old text is not in the file (tool error on the client)
    malformed: float = 0.0   # a tool-call block that does not parse (serving records a parse error)
    needless: float = 0.0    # a question on a clear request
    guess: float = 0.0       # on an ambiguous first turn: edit one reading instead of asking (right 1 in n)

    def __post_init__(self):
        if sum((self.wrong, self.broken, self.malformed, self.needless)) > 1:
            raise ValueError("wrong + broken + malformed + needless must be at most 1")


@dataclass
class Served:
    """One request the reference policy answered (tests build trajectories from these)."""

    request_id: str
    user: str
    metadata: dict[str, Any]
    messages: list[dict[str, str]]
    parsed: ParsedResponse
    text: str
    injected: str            # "" (the demonstration) or the error injected
    task: Task | None = None


TRAJECTORY_NAMESPACE = uuid.UUID("9d0f1a52-6a1e-4a8f-bb1c-2f3e4d5c6b7a")


class ReferencePolicy:
    """Answers from `Task.demonstration`, with configurable error injection; deterministic for a seed.

    Each answer's randomness is `Random(f"ref:{seed}:{user}:{n}")` for the user's n-th request, so it does not
    depend on how users interleave. Request ids are uuid5 of the same key."""

    NAMESPACE = uuid.UUID("5b1d1f3e-9a53-4c1e-8a53-7e5f0c1d2a90")

    def __init__(self, seed: int = 0, errors: ErrorRates | None = None, policy_version: str = "ref-1",
                 arms: tuple[str, ...] = ("control", "treatment")):
        self.seed, self.errors = seed, errors or ErrorRates()
        self.policy_version, self.arms = policy_version, arms
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.served: list[Served] = []

    def arm_of(self, user: str) -> str:
        return self.arms[int(uuid.uuid5(self.NAMESPACE, f"arm:{user}").hex, 16) % len(self.arms)]

    def respond(self, request: PolicyRequest) -> PolicyReply:
        if request.task is None:
            raise PolicyError("the reference policy needs the task")
        with self._lock:
            n = self._counts.get(request.user, 0)
            self._counts[request.user] = n + 1
        key = f"ref:{self.seed}:{request.user}:{n}"
        rng = random.Random(key)
        task, e = request.task, self.errors
        clarified = len(request.messages) > 2
        injected, text = "", task.demonstration(clarified=clarified)
        first_question = task.ambiguous and not clarified
        if first_question:
            if rng.random() < e.guess:  # right only when it picks the intended reading
                lucky = rng.random() < 1 / max(1, len(task.candidates))
                injected, text = "guess", (task.edit if lucky else wrong_edit(task)).text()
        else:
            u = rng.random()
            if u < e.wrong + e.broken + e.malformed:
                injected = "wrong" if u < e.wrong else "broken" if u < e.wrong + e.broken else "malformed"
                text = flawed_edit(task, injected)
            elif u < e.wrong + e.broken + e.malformed + e.needless:
                injected, text = "needless", "Which file do you mean?"
        parsed = parse_response(text)
        request_id = str(uuid.uuid5(self.NAMESPACE, key))
        reply = PolicyReply(request_id=request_id, parsed=parsed, text=text, policy_version=self.policy_version,
                            arm=self.arm_of(request.user), completion_tokens=max(1, len(text) // 4),
                            prompt_tokens=sum(len(m["content"]) for m in request.messages) // 4)
        with self._lock:
            self.served.append(Served(request_id, request.user, dict(request.metadata), list(request.messages),
                                      parsed, text, injected, task))
        return reply

    def trajectories(self, arm: str = "control", client_version: str = "reference-policy") -> list:
        """The trajectory serving would have logged for each request answered (the reference mode has no serving):
        the ids and time the user sent, placeholder token ids (about four characters a token) and log-probs."""
        from schemas.events import Trajectory

        out = []
        for s in self.served:
            m = s.metadata
            n = max(1, len(s.text) // 4)
            private = bool(m["privacy_mode"])
            out.append(Trajectory(
                event_id=str(uuid.uuid5(TRAJECTORY_NAMESPACE, s.request_id)), event_time=m["event_time"],
                user_id=s.user, org_id=m["org_id"], workspace_id=m["workspace_id"], session_id=m["session_id"],
                privacy_mode=private, client_version=client_version, request_id=s.request_id,
                policy_version=self.policy_version, arm=arm, prompt_token_ids=[] if private else [1] * 8,
                completion_token_ids=[] if private else [2] * n, behaviour_logprobs=[] if private else [-0.5] * n,
                tool_calls=s.parsed.records, latency_ms=20.0, prompt_tokens=8, completion_tokens=n,
                response_kind=s.parsed.kind, task_id=m.get("task_id")))
        return out


FLAWS = ("wrong", "broken", "malformed", "unclosed")


def flawed_edit(task: Task, flaw: str) -> str:
    """A response to `task` that fails the way a model's edits fail: "wrong" (applies, grades wrong), "broken"
    (its old text is not in the file: a tool error), "malformed" (the call's JSON does not parse) or "unclosed"
    (a tool-call block that never ends)."""
    args = task.edit.arguments
    if flaw == "wrong":
        return wrong_edit(task).text()
    if flaw == "broken":
        return ToolCall("edit_file", {**args, "old": args["old"] + "  # gone"}).text()
    call = json.dumps({"name": "edit_file", "arguments": args})
    if flaw == "malformed":
        return "<tool_call>\n" + call[:-2] + "\n</tool_call>"
    if flaw == "unclosed":
        return "<tool_call>\n" + call[:len(call) // 2]
    raise ValueError(f"unknown flaw {flaw!r}; known: {', '.join(FLAWS)}")


def wrong_edit(task: Task) -> ToolCall:
    """The reference edit with a wrong replacement: applies cleanly, grades wrong."""
    args = task.edit.arguments
    lines = args["new"].split("\n")
    last = lines[-1]
    if last.startswith("def "):          # a name or parameter: another name
        last = last.replace("(", "_x(", 1)
    elif "range(" in last:                # the loop bound: past the end
        last = last.replace("):", " + 1):", 1)
    else:                                 # a constant: another value
        last = last + "1"
    return ToolCall("edit_file", {**args, "new": "\n".join(lines[:-1] + [last])})
