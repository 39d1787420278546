"""`stream: true`: OpenAI's server-sent `chat.completion.chunk`s, as pure functions over what the engine sampled.

    data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", ...}}]}
    data: {... "delta": {"content": "Let me"} ...}                        as the tokens come
    data: {... "delta": {"content": "...", "tool_calls": [...]}, "finish_reason": "tool_calls",
           "response_kind": ..., "tool_call_records": [...], "request_id": ...}     a sample's last chunk
    data: {... "choices": [], "usage": {...}}                              with stream_options.include_usage
    data: [DONE]

A sample's content is sent while it is sampled only where it cannot change: the text is held back from the first
place a tool-call block could begin (the request's tool-call format's markers: `<tool_call>` for Hermes,
`[TOOL_CALLS]` for Mistral, `<|python_tag|>` or `{` for Llama 3's JSON calls; the calls are parsed, validated against the request's tools
and sent whole at the end, as `tool_calls` with their arguments), around a stop string that may still complete,
at a trailing incomplete character and at trailing whitespace. What is sent is always a prefix of the content the
same request gets without streaming (`protocol.final_content`), and the last chunk sends the rest. The log-probs
and the trajectory are exactly those of the non-streamed request with the same seed (the same tokens are sampled).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from schemas.tool_formats import FORMATS
from serving.protocol import (Delta, Generation, Served, choice_extras, finish_reason, token_logprobs, tool_calls_of,
                              usage)

log = logging.getLogger("rtrl.serving.streaming")

DONE = b"data: [DONE]\n\n"


def sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class ContentStream:
    """What of one sample's text may be sent so far (see the module docstring)."""

    def __init__(self, stop: tuple[str, ...] = (), markers: tuple[str, ...] = FORMATS["hermes"].markers):
        self.stop = stop
        self.markers = markers   # where a tool call can begin (schemas.tool_formats.ToolFormat.markers)
        self.sent = ""
        self.closed = False   # a tool-call block began: the rest goes in the last chunk

    def safe_prefix(self, text: str) -> str:
        for s in self.stop:           # the text ends before a stop string (the engine stops there)
            if (i := text.find(s)) >= 0:
                text = text[:i]
        found = [i for i in (text.find(m) for m in self.markers) if i >= 0]
        if found:
            self.closed = True
            text = text[:min(found)]
        else:
            for m in self.markers:
                text = _without_partial(text, m)
        for s in self.stop:
            text = _without_partial(text, s)
        return text.rstrip("\ufffd").strip()

    def update(self, text: str) -> str:
        """The new content to send, given the whole text sampled so far."""
        if self.closed:
            return ""
        safe = self.safe_prefix(text)
        if not safe.startswith(self.sent) or len(safe) <= len(self.sent):
            return ""
        delta, self.sent = safe[len(self.sent):], safe
        return delta

    def rest(self, content: str | None) -> str:
        """The content still to send once the sample's final content is known."""
        content = content or ""
        if not content.startswith(self.sent):  # cannot happen with a prefix-stable decoder; never send it twice
            log.warning("streamed content is not a prefix of the final content; the rest is not sent")
            return ""
        return content[len(self.sent):]


def _without_partial(text: str, marker: str) -> str:
    """`text` without a tail that could be the beginning of `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return text[:-k]
    return text


@dataclass
class Sample:
    """One sample of a streamed request, accumulated from the engine's deltas."""

    index: int
    content: ContentStream
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    generation: Generation | None = None   # set once the sample has finished (decoded once)

    def add(self, d: Delta) -> None:
        self.token_ids += d.token_ids
        self.logprobs += d.logprobs
        self.top += d.top
        if d.finish_reason is not None:
            self.finish_reason = d.finish_reason


@dataclass
class ChunkHead:
    """The fields every chunk of one response repeats."""

    request_id: str
    created: int
    model: str
    policy_version: str
    arm: str

    def chunk(self, choices: list[dict], **extra) -> bytes:
        return sse({"id": f"chatcmpl-{self.request_id}", "object": "chat.completion.chunk", "created": self.created,
                    "model": self.model, "choices": choices, "policy_version": self.policy_version, "arm": self.arm,
                    "request_id": self.request_id, **extra})


def role_chunk(head: ChunkHead, n: int) -> bytes:
    return head.chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                        "finish_reason": None} for i in range(n)])


def content_chunk(head: ChunkHead, index: int, text: str) -> bytes:
    return head.chunk([{"index": index, "delta": {"content": text}, "logprobs": None, "finish_reason": None}])


def last_chunk(head: ChunkHead, served: Served, i: int, rest: str) -> bytes:
    """A sample's last chunk: the rest of its content, its tool calls, the log-probs of all its tokens (content
    chunks are cut by text, not by token, so they carry none), why it ended and rtrl's fields."""
    g, p = served.generations[i], served.parsed[i]
    delta: dict = {"content": rest} if rest else {}
    if calls := tool_calls_of(served, i):
        delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(calls)]
    return head.chunk([{"index": i, "delta": delta, "logprobs": {"content": token_logprobs(g)},
                        "finish_reason": finish_reason(g, p), **choice_extras(served, i)}])


def usage_chunk(head: ChunkHead, served: Served) -> bytes:
    return head.chunk([], usage=usage(served))
