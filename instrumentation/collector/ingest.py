"""The request body -> validated records, with every rejection explained. No I/O here.

`decode_batch` checks the envelope `{"events": [...]}` and raises `BadRequest` (the whole request is refused);
`validate_events` checks each event with `schemas.parse_event`, stamps `received_time` on the valid ones and
reports the invalid ones by index (they are never produced).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from instrumentation.transport import Record
from schemas import SchemaError, parse_event

MAX_ECHO_CHARS = 400  # event_id / field / reason are cut to this in responses (input is echoed, keep it short)


class BadRequest(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Rejection:
    index: int
    event_id: str | None
    field: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class ValidatedBatch:
    records: list[Record] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


def _no_constants(name: str):
    raise ValueError(f"{name} is not valid JSON")


def decode_batch(body: bytes, max_events: int) -> list[Any]:
    """The `events` list of a request body. Raises BadRequest 400 (not JSON, wrong shape) or 413 (too many)."""
    try:
        doc = json.loads(body, parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise BadRequest(400, "invalid_json", "body is not UTF-8 encoded JSON") from None
    except json.JSONDecodeError as e:
        raise BadRequest(400, "invalid_json", f"body is not valid JSON: {e.msg} at line {e.lineno} column "
                                              f"{e.colno}") from None
    except ValueError as e:  # NaN/Infinity, integers beyond the digit limit
        raise BadRequest(400, "invalid_json", f"body is not valid JSON: {echo(str(e))}") from None
    except RecursionError:
        raise BadRequest(400, "invalid_json", "body is nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadRequest(400, "invalid_shape", f'body must be a JSON object {{"events": [...]}}, got '
                                               f"{type(doc).__name__}")
    extra = sorted(k for k in doc if k != "events")
    if extra:
        raise BadRequest(400, "invalid_shape", echo(f"unknown top-level key(s) {extra[:5]!r}")
                         + '; the body is {"events": [...]}')
    events = doc.get("events")
    if not isinstance(events, list):
        raise BadRequest(400, "invalid_shape", '"events" must be a JSON array of events')
    if len(events) > max_events:
        raise BadRequest(413, "too_many_events", f"{len(events)} events in one request; at most {max_events} "
                                                 "are accepted: split the batch")
    return events


def encodable(text: str) -> str:
    """`text` with lone UTF-16 surrogates (legal in JSON escapes, not in UTF-8) replaced by '?', so that an answer
    quoting client input can always be encoded."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def echo(text: str) -> str:
    """Client input quoted back in a response: cut short and encodable."""
    return encodable(text[:MAX_ECHO_CHARS])


def _event_id(item: Any) -> str | None:
    eid = item.get("event_id") if isinstance(item, dict) else None
    return echo(eid) if isinstance(eid, str) else None


def _precheck(item: Any) -> None:
    """Refuse what `parse_event` must not be given: `schemas.compat.upgrade` steps one version at a time from the
    event's `schema_version`, so a hostile `-10**12` would keep a worker (and the GIL) busy for hours."""
    if isinstance(item, dict):
        v = item.get("schema_version")
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            raise SchemaError("schema_version", "Input should be greater than or equal to 1")


def validate_events(items: list[Any], received_time: datetime) -> ValidatedBatch:
    """Validate each item; valid events get `received_time` and become records, invalid ones rejections."""
    out = ValidatedBatch()
    for i, item in enumerate(items):
        try:
            _precheck(item)
            event = parse_event(item)
        except SchemaError as e:
            out.rejected.append(Rejection(i, _event_id(item), echo(e.field), echo(e.reason)))
            continue
        except RecursionError:  # pathological nesting inside one event: reject it, never crash
            out.rejected.append(Rejection(i, _event_id(item), "<event>", "nested too deeply"))
            continue
        event.received_time = received_time
        out.records.append(Record.of(event))
    return out
