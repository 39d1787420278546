"""The tool-call protocol shared by serving, the simulated users and the eval harness.

A model response is plain text. Tool calls are written in it as (the Hermes convention many open models use):

    <tool_call>
    {"name": "edit_file", "arguments": {"path": "app/util.py", "old": "RETRIES = 3", "new": "RETRIES = 5"}}
    </tool_call>

one block per call; text outside the blocks is allowed only when there is no call (then the response is a plain
answer, or a question when its last non-blank character is '?'). `parse_response` is strict and says why a call
is broken; broken calls are recorded as `ToolCallRecord`s with status parse_error or validation_error and the
trajectory keeps them (the reward job scores them as hard negatives).

Tools (arguments are all strings unless said otherwise):
    read_file(path)                         the file's text
    edit_file(path, old, new)               replace the single occurrence of `old` with `new`
    search(query)                           lines of the workspace containing `query`
    run_terminal(command)                   run a command in the sandbox
    lint(path)                              lint one file
A request may offer its own tools (OpenAI `tools`): its calls are then validated against those tools' JSON
Schemas (`ToolSet`), and the five above are only the default set of a request that offers none.
Serving turns valid calls into OpenAI `tool_calls` (arguments as a JSON string); clients send them back the
same way, so every side speaks the OpenAI chat format on the wire and this text format to the model.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from schemas.events import ResponseKind, ToolCallRecord, ToolCallStatus

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args: tuple[tuple[str, str], ...]  # (argument, description); every argument is a required string


TOOLS: dict[str, ToolSpec] = {t.name: t for t in (
    ToolSpec("read_file", "Read a file of the workspace.", (("path", "workspace-relative path"),)),
    ToolSpec("edit_file", "Replace the single occurrence of `old` in a file with `new`.",
             (("path", "workspace-relative path"), ("old", "exact text to replace (must occur once)"),
              ("new", "replacement text"))),
    ToolSpec("search", "Find the lines of the workspace that contain a text.", (("query", "text to look for"),)),
    ToolSpec("run_terminal", "Run a shell command in the workspace (sandboxed).", (("command", "the command"),)),
    ToolSpec("lint", "Lint one file.", (("path", "workspace-relative path"),)),
)}
EDIT_TOOLS = frozenset({"edit_file"})


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]   # strings for the built-in five; whatever its schema allows for a request's tool

    def text(self) -> str:
        """The canonical text of this call, as a model should write it."""
        return f"{OPEN}\n{json.dumps({'name': self.name, 'arguments': self.arguments}, ensure_ascii=False)}\n{CLOSE}"


@dataclass
class ParsedResponse:
    kind: ResponseKind
    calls: list[ToolCall] = field(default_factory=list)          # the valid calls, in order
    records: list[ToolCallRecord] = field(default_factory=list)  # every call, valid or broken, in order
    content: str = ""                                            # the text outside tool-call blocks

    @property
    def broken(self) -> int:
        return sum(r.status is not ToolCallStatus.ok for r in self.records)


class ToolSet:
    """The tools a request offers (OpenAI `tools`), each call validated against its own JSON Schema.

    Serving parses a response against the request's ToolSet; a request that offers no tools is parsed against
    the built-in five (`tools=None` everywhere below). A call to a tool that is not offered, or whose arguments
    do not match the tool's `parameters` schema, is broken (validation_error).

        tools = ToolSet.from_openai(body["tools"])     # ValueError naming tools[i] when a schema is malformed
        parse_response(text, tools)
    """

    def __init__(self, schemas: dict[str, dict]):
        from jsonschema import Draft202012Validator

        self.schemas = schemas
        self._validators = {n: Draft202012Validator(s) for n, s in schemas.items()}

    @classmethod
    def from_openai(cls, tools: Any) -> "ToolSet":
        """OpenAI `tools` ([{"type": "function", "function": {"name", "description", "parameters"}}]) -> a
        ToolSet; ValueError("tools[i]...: why") for anything malformed (the caller's 400)."""
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        if not isinstance(tools, list):
            raise ValueError("tools: must be a list of {\"type\": \"function\", \"function\": {...}}")
        schemas: dict[str, dict] = {}
        for i, t in enumerate(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
                raise ValueError(f"tools[{i}]: must be {{\"type\": \"function\", \"function\": {{...}}}}")
            name = fn.get("name")
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", name):
                raise ValueError(f"tools[{i}].function.name: 1-64 letters, digits, '_', '.', ':' or '-' "
                                 f"(got {name!r})")
            if name in schemas:
                raise ValueError(f"tools[{i}].function.name: {name!r} is offered twice")
            params = fn.get("parameters", {"type": "object", "properties": {}})
            if not isinstance(params, dict):
                raise ValueError(f"tools[{i}].function.parameters: must be a JSON Schema object")
            try:
                Draft202012Validator.check_schema(params)
            except SchemaError as e:
                raise ValueError(f"tools[{i}].function.parameters: not a valid JSON Schema: {e.message}") from None
            schemas[name] = params
        return cls(schemas)

    def only(self, name: str) -> "ToolSet":
        """The set holding just `name` (tool_choice naming one function)."""
        return ToolSet({name: self.schemas[name]})

    def validate(self, name: Any, arguments: Any) -> str:
        """'' when the call is valid, else why not."""
        if not isinstance(name, str) or name not in self._validators:
            offered = ", ".join(sorted(self.schemas)) or "none (tool_choice is none)"
            return f"tool {name!r} was not offered; offered: {offered}"
        if not isinstance(arguments, dict):
            return f"arguments of {name} must be an object, got {type(arguments).__name__}"
        error = next(iter(sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.path))), None)
        if error is not None:
            where = "/".join(map(str, error.path))
            return f"{name}: arguments do not match its schema{' at ' + where if where else ''}: {error.message}"
        return ""


def validate_call(name: Any, arguments: Any, tools: ToolSet | None = None) -> str:
    """'' when the call is valid, else why not: against `tools` when a request offered some, else the built-in
    five."""
    if tools is not None:
        return tools.validate(name, arguments)
    if not isinstance(name, str) or name not in TOOLS:
        return f"unknown tool {name!r}; known: {', '.join(sorted(TOOLS))}"
    if not isinstance(arguments, dict):
        return f"arguments of {name} must be an object, got {type(arguments).__name__}"
    spec = TOOLS[name]
    wanted = [a for a, _ in spec.args]
    missing = [a for a in wanted if a not in arguments]
    if missing:
        return f"{name}: missing argument(s) {', '.join(missing)}"
    extra = sorted(set(arguments) - set(wanted))
    if extra:
        return f"{name}: unexpected argument(s) {', '.join(extra)}"
    for a in wanted:
        if not isinstance(arguments[a], str):
            return f"{name}: argument {a} must be a string, got {type(arguments[a]).__name__}"
    if name in ("read_file", "edit_file", "lint") and not arguments["path"].strip():
        return f"{name}: path is empty"
    if name == "edit_file" and arguments["old"] == "":
        return "edit_file: old is empty (nothing to replace)"
    return ""


def _utf8(text: str) -> str:
    """`text` with lone UTF-16 surrogates replaced by '?': a model (or an endpoint's JSON escapes) can produce them,
    and neither a `ToolCallRecord` nor a UTF-8 answer can hold one."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _encodable(obj: Any) -> bool:
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse_block(body: str, tools: ToolSet | None) -> tuple[ToolCallRecord, ToolCall | None]:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCallRecord(name=_guess_name(body), status=ToolCallStatus.parse_error,
                              error=f"not valid JSON: {e.msg} at character {e.pos}"), None
    except RecursionError:
        return ToolCallRecord(name=_guess_name(body), status=ToolCallStatus.parse_error,
                              error="not valid JSON: nested too deeply"), None
    if not _encodable(obj):  # "\ud800" escapes decode to lone surrogates: not text any tool could take
        return ToolCallRecord(name=_guess_name(_utf8(body)), status=ToolCallStatus.parse_error,
                              error="not valid JSON text: a \\u escape is a lone UTF-16 surrogate"), None
    return call_record(obj, "arguments", tools)


def call_record(obj: Any, args_key: str, tools: ToolSet | None) -> tuple[ToolCallRecord, ToolCall | None]:
    """One decoded call object (`{"name": ..., args_key: {...}}`) -> its record and, when valid, the call."""
    if not isinstance(obj, dict) or "name" not in obj or args_key not in obj:
        return ToolCallRecord(name="", status=ToolCallStatus.parse_error,
                              error=f'a call must be a JSON object with "name" and "{args_key}"'), None
    name, args = obj["name"], obj[args_key]
    extra = sorted(set(obj) - {"name", args_key})
    why = f"unexpected key(s) {', '.join(extra)} in the call" if extra else validate_call(name, args, tools)
    shown = name[:128] if isinstance(name, str) else ""
    if why:
        return ToolCallRecord(name=shown, status=ToolCallStatus.validation_error, error=why[:2048]), None
    return ToolCallRecord(name=shown, status=ToolCallStatus.ok), ToolCall(name, dict(args))


_NAME = re.compile(r'"name"\s*:\s*"([^"]{1,128})"')


def _guess_name(body: str) -> str:
    m = _NAME.search(body)
    return m.group(1) if m else ""


def parse_response(text: str, tools: ToolSet | None = None) -> ParsedResponse:
    """Strictly parse a model response (see the module docstring for the format) against the tools a request
    offered (None: the built-in five). Never raises: whatever the text, broken calls become records with the
    reason."""
    text = _utf8(text)
    records: list[ToolCallRecord] = []
    calls: list[ToolCall] = []
    outside: list[str] = []
    pos = 0
    while True:
        start = text.find(OPEN, pos)
        if start < 0:
            outside.append(text[pos:])
            break
        outside.append(text[pos:start])
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:
            body = text[start + len(OPEN):]
            records.append(ToolCallRecord(name=_guess_name(body), status=ToolCallStatus.parse_error,
                                          error=f"{OPEN} without {CLOSE}"))
            break
        record, call = _parse_block(text[start + len(OPEN):end].strip(), tools)
        records.append(record)
        if call is not None:
            calls.append(call)
        pos = end + len(CLOSE)
    content = "".join(outside).strip()
    blocks = len(records)
    if CLOSE in content:
        records.append(ToolCallRecord(name="", status=ToolCallStatus.parse_error, error=f"{CLOSE} without {OPEN}"))
        content = content.replace(CLOSE, "").strip()
    return finish(records, calls, content, blocks)


def finish(records: list[ToolCallRecord], calls: list[ToolCall], content: str,
           attempts: int | None = None) -> ParsedResponse:
    """The response from its call records, valid calls and outside text, in any tool-call format
    (schemas/tool_formats.py). `attempts`: how many of the records are calls the model wrote (default all). Text
    beside a call is a broken call; an edit call makes an edit; a call-free text ending in '?' is a question."""
    if content and (len(records) if attempts is None else attempts):
        records = records + [ToolCallRecord(name="", status=ToolCallStatus.parse_error,
                                            error="text outside the tool-call blocks of a response that calls tools")]
    if any(c.name in EDIT_TOOLS for c in calls):
        kind = ResponseKind.edit
    elif not records and content.endswith("?"):
        kind = ResponseKind.question
    else:
        kind = ResponseKind.answer
    return ParsedResponse(kind, calls, records, content)


def openai_tools() -> list[dict]:
    """The tools as the OpenAI chat API's `tools` parameter."""
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description,
        "parameters": {"type": "object", "additionalProperties": False, "required": [a for a, _ in t.args],
                       "properties": {a: {"type": "string", "description": d} for a, d in t.args}}}}
            for t in TOOLS.values()]


def to_openai_tool_calls(calls: list[ToolCall], request_id: str) -> list[dict]:
    return [{"id": f"call_{request_id}_{i}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
            for i, c in enumerate(calls)]


def _field(obj: Any, name: str) -> Any:
    """`obj[name]` of a dict, `obj.name` of the openai client's objects; ValueError when absent."""
    value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
    if value is None:
        raise ValueError(f"tool call without {name!r}")
    return value


def from_openai_tool_calls(tool_calls: list[Any]) -> list[ToolCall]:
    """OpenAI `tool_calls` (dicts or the openai client's objects) -> ToolCalls; anything invalid or malformed (not
    a list, a call without a function, arguments that are not a JSON object of strings) raises ValueError."""
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, (list, tuple)):
        raise ValueError(f"tool_calls must be a list, got {type(tool_calls).__name__}")
    out = []
    for tc in tool_calls:
        fn = _field(tc, "function")
        name, raw = _field(fn, "name"), _field(fn, "arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as e:
            raise ValueError(f"tool call {name}: arguments are not JSON ({e.msg})") from None
        except RecursionError:
            raise ValueError(f"tool call {name}: arguments are nested too deeply") from None
        why = validate_call(name, args)
        if why:
            raise ValueError(why)
        if not _encodable(args):
            raise ValueError(f"tool call {name}: an argument holds a lone UTF-16 surrogate")
        out.append(ToolCall(name, args))
    return out
