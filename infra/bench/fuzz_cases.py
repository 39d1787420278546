"""Hostile input for the fuzzers: hypothesis strategies of malformed, oversized, wrong-type,
unicode-edge and replayed events, tool-call texts and OpenAI tool calls.

Events start from the schema fixtures (`schemas/fixtures/<type>/v<N>.json`: every type, every version ever
written), get a fresh `event_id`, then 0-3 mutations (a field dropped, retyped, set to an edge value, an unknown
field added, privacy mode switched on with its content kept, ...), then one of several encodings (plain JSON,
NaN/Infinity tokens, lone surrogates as raw CESU bytes, overlong UTF-8, a BOM, truncation, a duplicated key,
nesting thousands deep, a body past the wire cap). Zero mutations and the plain encoding give valid events, so
the accept paths are fuzzed too.
"""

from __future__ import annotations

import json
import uuid
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from schemas.tool_protocol import CLOSE, OPEN, TOOLS
from schemas.wire import MAX_WIRE_BYTES

FIXTURES = Path(__file__).resolve().parents[2] / "schemas" / "fixtures"

# Strings that have broken parsers, logs and dashboards elsewhere: NUL and other controls, bidi overrides (RTL
# marks, "Trojan source"), zero-width and BOM characters, lone UTF-16 surrogates (legal as JSON escapes, not
# encodable as UTF-8), combining marks, astral-plane characters, path traversal, format strings, markup.
EDGE_STRINGS = (
    "", " ", "\x00", "a\x00b", "\x00" * 64, "\r\n", "line\nbreak", "\x1b[31mred\x1b[0m", "\x7f\x85\x9f",
    "\u202e", "abc\u202edcba", "\u200f\u200e", "\u2066\u2069", "\ufeff", "\u200b\u200c\u200d", "\ufffe\uffff",
    "\ud800", "\udfff", "a\ud83d", "\udc00x", "\ud83d\ude00", "\U0001f600", "e\u0301\u0301\u0301",
    "\U0010ffff", "𝕏" * 40, "../../../etc/passwd", "%s%n%x", "{0.__class__}", "<script>alert(1)</script>",
    "' OR 1=1 --", "x" * 129, "x" * 4097, "y" * 100_001,
)
EDGE_TIMES = (
    "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z",
    "2026-11-01T10:00:00", "2026-11-01", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-11-01T25:00:00Z",
    "2026-11-01T10:00:00+24:00", "", "now", "\u0662\u0660\u0662\u0666-11-01T10:00:00Z", "2026-11-01T10:00:00Z\x00",
    0, -1, 1e20, -1e20, 253402300800, True, None,
)
EDGE_NUMBERS = (0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30, -(10**30), 0.5, -0.0, 1e308, -1e308,
                float("inf"), float("-inf"), float("nan"), True, False)
OVERLONG = (b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xc0\x80", b"\xed\xa0\x80", b"\xff", b"\xfe",
            b"\xf8\x88\x80\x80\x80", b"\x80")


@cache
def fixtures() -> tuple[dict, ...]:
    """Every fixture event (each type, each version), decoded."""
    return tuple(json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*/v*.json")))


def nested(depth: int, kind: str = "list") -> Any:
    v: Any = 0
    for _ in range(depth):
        v = [v] if kind == "list" else {"a": v}
    return v


def scalar_values() -> st.SearchStrategy:
    return st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(EDGE_NUMBERS),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                     st.text(st.characters(exclude_categories=()), max_size=20), st.sampled_from(EDGE_STRINGS))


def wrong_values() -> st.SearchStrategy:
    """Anything a hostile client could put in a field."""
    return st.one_of(
        scalar_values(),
        st.lists(scalar_values(), max_size=4),
        st.dictionaries(st.text(max_size=6), scalar_values(), max_size=3),
        st.sampled_from(EDGE_TIMES),
        st.builds(nested, st.integers(1, 60), st.sampled_from(["list", "dict"])),
        st.builds(lambda n, v: [v] * n, st.sampled_from([65_537, 200_001]), st.sampled_from([0, 1, -1, "0"])),
    )


@st.composite
def hostile_event(draw, max_mutations: int = 3) -> dict:
    """A fixture event with 0..max_mutations hostile mutations (a dict: JSON-encodable, maybe not as UTF-8)."""
    d = dict(draw(st.sampled_from(fixtures())))
    d["event_id"] = str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)), version=4))
    for _ in range(draw(st.integers(0, max_mutations))):
        kind = draw(st.sampled_from(["set", "set", "set", "drop", "extra", "privacy", "type", "version", "time",
                                     "id", "list_item"]))
        keys = sorted(d)
        if kind == "set" and keys:
            d[draw(st.sampled_from(keys))] = draw(wrong_values())
        elif kind == "drop" and keys:
            d.pop(draw(st.sampled_from(keys)))
        elif kind == "extra":
            d[draw(st.sampled_from(["extra", "__proto__", "", "\u202e", "\x00", "EVENT_TYPE", "Event_Id"]))] = \
                draw(wrong_values())
        elif kind == "privacy":  # privacy mode claimed, content kept: must be refused
            d["privacy_mode"] = True
            d.setdefault("text", "my content")
        elif kind == "type":
            d["event_type"] = draw(st.one_of(st.sampled_from(sorted({f["event_type"] for f in fixtures()})),
                                             st.sampled_from(EDGE_STRINGS[:24]), scalar_values()))
        elif kind == "version":
            d["schema_version"] = draw(st.one_of(st.integers(-(10**6), 10**6), st.sampled_from(EDGE_NUMBERS),
                                                 st.sampled_from(["1", "v1", None, [1]])))
        elif kind == "time":
            d[draw(st.sampled_from(["event_time", "received_time"]))] = draw(st.sampled_from(EDGE_TIMES))
        elif kind == "id":
            d[draw(st.sampled_from(["event_id", "user_id", "request_id", "session_id", "file_id", "org_id"]))] = \
                draw(st.one_of(st.sampled_from(EDGE_STRINGS),
                               st.sampled_from(["{" + str(uuid.UUID(int=7)) + "}", "urn:uuid:" + str(uuid.UUID(int=7)),
                                                str(uuid.UUID(int=7)).upper(), "not-a-uuid"])))
        elif kind == "list_item":
            lists = [k for k in keys if isinstance(d[k], list) and d[k]]
            if lists:
                k = draw(st.sampled_from(lists))
                items = list(d[k])
                items[draw(st.integers(0, len(items) - 1))] = draw(wrong_values())
                d[k] = items
    return d


def _dumps(value: Any, **kw) -> bytes:
    return json.dumps(value, **kw).encode("utf-8", "surrogatepass")


ENCODINGS = ("json", "json", "json", "json_raw_unicode", "truncate", "overlong", "bom", "duplicate_key",
             "trailing", "not_object", "deep", "oversize", "nul_bytes")


@st.composite
def hostile_wire(draw) -> bytes:
    """One wire message (bytes): a hostile event under a hostile encoding."""
    d = draw(hostile_event())
    how = draw(st.sampled_from(ENCODINGS))
    if how == "json":
        return _dumps(d)  # NaN/Infinity tokens for non-finite floats, \\ud800 escapes for lone surrogates
    if how == "json_raw_unicode":
        return _dumps(d, ensure_ascii=False)  # lone surrogates become invalid UTF-8 (CESU) bytes
    raw = _dumps(d)
    if how == "truncate":
        return raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
    if how == "overlong":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from(OVERLONG)) + raw[at:]
    if how == "bom":
        return b"\xef\xbb\xbf" + raw
    if how == "duplicate_key":  # the first copy says one thing, the second another
        return b'{"event_type": "trajectory", "privacy_mode": false, ' + raw[1:]
    if how == "trailing":
        return raw + draw(st.sampled_from([b"\n{}", b" x", b"\x00", b",", b"]"]))
    if how == "not_object":
        return _dumps(draw(st.one_of(st.lists(st.integers(), max_size=3), st.text(max_size=10), st.integers(),
                                     st.none(), st.just([d]))))
    if how == "deep":
        n = draw(st.sampled_from([1_000, 5_000, 50_000]))
        return draw(st.sampled_from([b"[" * n + b"]" * n, b'{"a":' * n + b"1" + b"}" * n,
                                     raw[:-1] + b', "nest": ' + b"[" * n + b"]" * n + b"}"]))
    if how == "oversize":
        return raw[:-1] + b', "pad": "' + b"p" * (MAX_WIRE_BYTES + 1) + b'"}'
    return raw.replace(b'"', b'"\x00', draw(st.integers(1, 3)))  # nul_bytes


@st.composite
def replayed_stream(draw, max_messages: int = 12) -> list[bytes | None]:
    """A Kafka partition's values: hostile messages, tombstones (None) and replays of earlier messages (a client
    retry or a hostile replay: same event_id)."""
    out: list[bytes | None] = []
    for _ in range(draw(st.integers(1, max_messages))):
        kind = draw(st.sampled_from(["wire", "wire", "valid", "valid", "replay", "tombstone"]))
        if kind == "replay" and out:
            out.append(draw(st.sampled_from(out)))
        elif kind == "tombstone":
            out.append(None)
        elif kind == "valid":
            out.append(_dumps(draw(hostile_event(max_mutations=0))))
        else:
            out.append(draw(hostile_wire()))
    return out


# -- the tool-call protocol ----------------------------------------------------------------------------------------

def _any_text(max_size: int = 30) -> st.SearchStrategy:
    return st.one_of(st.text(max_size=max_size), st.text(st.characters(exclude_categories=()), max_size=max_size),
                     st.sampled_from(EDGE_STRINGS[:31]))


CLEAN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./ "


@st.composite
def tool_call_body(draw) -> str:
    """The JSON inside a <tool_call> block: valid, retyped, missing or extra arguments, escapes, nesting."""
    name = draw(st.one_of(st.sampled_from(sorted(TOOLS)), _any_text(12), scalar_values()))
    spec = TOOLS.get(name) if isinstance(name, str) else None
    args: Any = {a: draw(_any_text()) for a, _ in spec.args} if spec else draw(
        st.dictionaries(_any_text(8), scalar_values(), max_size=3))
    how = draw(st.sampled_from(["ok", "ok", "clean", "clean", "retype", "drop", "extra", "args_not_object",
                                "extra_key", "escape", "deep", "truncate", "not_object"]))
    if how == "clean" and spec:   # a call a model could really make: plain non-empty values (must be accepted)
        args = {a: draw(st.text(alphabet=CLEAN_CHARS, min_size=1, max_size=16)) for a, _ in spec.args}
    call: Any = {"name": name, "arguments": args}
    if how == "retype" and isinstance(args, dict) and args:
        args[draw(st.sampled_from(sorted(args)))] = draw(wrong_values())
    elif how == "drop" and isinstance(args, dict) and args:
        args.pop(draw(st.sampled_from(sorted(args))))
    elif how == "extra" and isinstance(args, dict):
        args["extra"] = "x"
    elif how == "args_not_object":
        call["arguments"] = draw(scalar_values())
    elif how == "extra_key":
        call["id"] = 1
    elif how == "not_object":
        call = draw(st.one_of(st.lists(scalar_values(), max_size=3), scalar_values()))
    text = json.dumps(call, ensure_ascii=draw(st.booleans()), allow_nan=True)
    if how == "escape":
        text = text.replace('"', '"\\ud800', 1) if draw(st.booleans()) else text.replace("a", "\\udfff", 1)
    elif how == "deep":
        n = draw(st.sampled_from([500, 5_000, 50_000]))
        text = "[" * n + "]" * n
    elif how == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    return text


@st.composite
def model_response(draw) -> str:
    """A model's response text: prose, questions, tool-call blocks (well formed or not), stray tags."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["block", "block", "prose", "question", "open_only", "close_only", "nested"]))
        if kind == "block":
            parts.append(f"{OPEN}\n{draw(tool_call_body())}\n{CLOSE}")
        elif kind == "prose":
            parts.append(draw(_any_text(40)))
        elif kind == "question":
            parts.append(draw(_any_text(20)) + "?")
        elif kind == "open_only":
            parts.append(OPEN + draw(tool_call_body()))
        elif kind == "close_only":
            parts.append(draw(_any_text(10)) + CLOSE)
        else:
            parts.append(f"{OPEN}{OPEN}{draw(tool_call_body())}{CLOSE}{CLOSE}")
    return draw(st.sampled_from(["", "\n", " "])).join(parts)


@st.composite
def openai_tool_calls(draw) -> Any:
    """What an OpenAI-compatible endpoint might return as `message.tool_calls` (clients parse it back)."""
    def one():
        return st.one_of(
            st.builds(lambda n, a: {"id": "c", "type": "function", "function": {"name": n, "arguments": a}},
                      st.one_of(st.sampled_from(sorted(TOOLS)), _any_text(10)),
                      st.one_of(st.builds(json.dumps, st.dictionaries(st.sampled_from(["path", "old", "new", "query",
                                                                                       "command", "x"]),
                                                                     _any_text(10), max_size=4)),
                                _any_text(20), scalar_values())),
            st.dictionaries(st.sampled_from(["id", "type", "function"]), scalar_values(), max_size=3),
            st.builds(lambda f: {"function": f}, st.one_of(scalar_values(), st.dictionaries(
                st.sampled_from(["name", "arguments"]), scalar_values(), max_size=2))),
            scalar_values())
    return draw(st.one_of(st.lists(one(), max_size=3), st.none(), scalar_values()))
