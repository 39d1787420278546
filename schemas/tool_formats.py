"""Tool-call text formats: how a model family writes its calls, parsed and rendered symmetrically.

    hermes       <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one block per call (Qwen, Hermes;
                 the default, `schemas.tool_protocol`)
    llama3_json  {"name": ..., "parameters": {...}}, the whole message, several calls joined by "; ", optionally
                 after <|python_tag|> (Llama 3.1+)
    mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral; a call may carry the string "id" its
                 chat template writes into the conversation)

`get_format(name).parse(text, tools)` gives the same `ParsedResponse` as `tool_protocol.parse_response` does for
Hermes: the valid calls, a record for every call with the reason a broken one is broken, the text outside the
calls, and the response kind; it never raises. `render(calls)` writes calls as the family writes them, so
`parse(render(calls)).calls == calls`. `detect(chat_template)` picks the format a checkpoint's chat template
speaks (Hermes when it shows none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from schemas.events import ToolCallRecord, ToolCallStatus
from schemas.tool_protocol import (ParsedResponse, ToolCall, ToolSet, _encodable, _guess_name, _utf8, call_record,
                                   finish, parse_response)

PYTHON_TAG = "<|python_tag|>"
MISTRAL_TAG = "[TOOL_CALLS]"


def _record(obj: Any, args_key: str, tools: ToolSet | None) -> tuple[ToolCallRecord, ToolCall | None]:
    if not _encodable(obj):
        return ToolCallRecord(name="", status=ToolCallStatus.parse_error,
                              error="not valid JSON text: a \\u escape is a lone UTF-16 surrogate"), None
    return call_record(obj, args_key, tools)


def _loads(body: str) -> tuple[Any, str | None]:
    try:
        return json.loads(body), None
    except json.JSONDecodeError as e:
        return None, f"not valid JSON: {e.msg} at character {e.pos}"
    except RecursionError:
        return None, "not valid JSON: nested too deeply"


def _broken(body: str, why: str) -> ToolCallRecord:
    return ToolCallRecord(name=_guess_name(body), status=ToolCallStatus.parse_error, error=why)


def _split_calls(body: str) -> list[str]:
    """Llama 3's several calls in one message, "; "-separated at the top level (not inside strings or braces)."""
    parts, depth, start, in_str, esc = [], 0, 0, False, False
    for i, ch in enumerate(body):
        if in_str:
            esc, in_str = (not esc and ch == "\\"), in_str and not (ch == '"' and not esc)
            continue
        if ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == ";" and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def _parse_llama3(text: str, tools: ToolSet | None = None) -> ParsedResponse:
    text = _utf8(text)
    body = text.strip()
    tagged = body.startswith(PYTHON_TAG)
    body = body[len(PYTHON_TAG):].strip() if tagged else body
    if not tagged and not (body.startswith("{") and '"name"' in body):
        return finish([], [], body)          # a plain answer (or question)
    records, calls = [], []
    for part in _split_calls(body):
        obj, why = _loads(part)
        record, call = (_broken(part, why), None) if why else _record(obj, "parameters", tools)
        records.append(record)
        if call is not None:
            calls.append(call)
    if not records:
        records.append(ToolCallRecord(name="", status=ToolCallStatus.parse_error, error=f"{PYTHON_TAG} without a call"))
    return finish(records, calls, "")


def _render_llama3(calls: list[ToolCall]) -> str:
    return "; ".join(json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls)


def _parse_mistral(text: str, tools: ToolSet | None = None) -> ParsedResponse:
    text = _utf8(text)
    at = text.find(MISTRAL_TAG)
    if at < 0:
        return finish([], [], text.strip())
    content, body = text[:at].strip(), text[at + len(MISTRAL_TAG):].strip()
    obj, why = _loads(body)
    if why:
        return finish([_broken(body, why)], [], content)
    if not isinstance(obj, list) or not obj:
        return finish([ToolCallRecord(name="", status=ToolCallStatus.parse_error,
                                      error=f"{MISTRAL_TAG} must be followed by a non-empty JSON array of calls")],
                      [], content)
    records, calls = [], []
    for item in obj:
        if isinstance(item, dict) and isinstance(item.get("id"), str):   # the call id Mistral's template writes
            item = {k: v for k, v in item.items() if k != "id"}
        record, call = _record(item, "arguments", tools)
        records.append(record)
        if call is not None:
            calls.append(call)
    return finish(records, calls, content)


def _render_mistral(calls: list[ToolCall]) -> str:
    return MISTRAL_TAG + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)


@dataclass(frozen=True)
class ToolFormat:
    name: str
    parse: Callable[..., ParsedResponse]           # (text, tools=None) -> ParsedResponse
    render: Callable[[list[ToolCall]], str]
    markers: tuple[str, ...]                      # where a call can begin in a stream (hold text back from there)


FORMATS: dict[str, ToolFormat] = {f.name: f for f in (
    ToolFormat("hermes", parse_response, lambda calls: "\n".join(c.text() for c in calls), ("<tool_call>",)),
    ToolFormat("llama3_json", _parse_llama3, _render_llama3, (PYTHON_TAG, "{")),
    ToolFormat("mistral", _parse_mistral, _render_mistral, (MISTRAL_TAG,)),
)}


def get_format(name: str) -> ToolFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call format {name!r}; known: {', '.join(FORMATS)}") from None


def detect(chat_template: str | None) -> str:
    """The format a chat template speaks: Mistral's [TOOL_CALLS], Hermes' <tool_call>, Llama 3's JSON calls
    ("parameters" with its <|python_tag|> / ipython role / <|eot_id|>); Hermes when it shows none."""
    t = chat_template or ""
    if MISTRAL_TAG in t:
        return "mistral"
    if "<tool_call>" in t:
        return "hermes"
    if "parameters" in t and any(m in t for m in (PYTHON_TAG, "ipython", "<|eot_id|>")):
        return "llama3_json"
    return "hermes"
