"""The request body -> validated records, with every rejection explained. No I/O here.

`decode_batch` checks the envelope `{"events": [...]}` and raises `BadRequest` (the whole request is refused);
`validate_events` checks each event with `schemas.parse_event`, then what the server decided about the sender
(`Admission`: the key's org and role, the server's receipt time), redacts secrets in its free-text fields again,
stamps `received_time` on the valid ones and reports the invalid ones by index (they are never produced).

Per-event rejections beyond the schema (each counted under its code in `ValidatedBatch.counts`):
  org_mismatch        org_id is not the key's org (a `*` gateway key may write any org)
  role_forbidden      a `trajectory` event from a key whose role is not `serving`
  event_time_future   event_time more than `max_future_s` after the receipt time
  event_time_past     event_time more than `max_past_s` before the receipt time
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from schemas.api_keys import ANY_ORG
from instrumentation.prepare import redact_model
from instrumentation.transport import Record
from schemas import SchemaError, parse_event

TRAJECTORY = "trajectory"
WRITES_TRAJECTORIES = ("serving",)
REJECTION_CODES = ("schema", "org_mismatch", "role_forbidden", "event_time_future", "event_time_past")

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


@dataclass(frozen=True, slots=True)
class Admission:
    """What the server decided about a request's sender and its arrival -- from the API key and the server clock,
    never from the request. `org` is None for a version-1 key (such requests are refused before validation)."""
    org: str | None
    role: str
    received_time: datetime
    max_future_s: float
    max_past_s: float
    redact: bool = True

    def may_write_org(self, org_id: str) -> bool:
        return self.org is not None and (self.org == ANY_ORG or self.org == org_id)


@dataclass(slots=True)
class ValidatedBatch:
    records: list[Record] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # rejections by code (REJECTION_CODES)
    secrets_redacted: int = 0                          # secrets the collector's own redaction replaced
    events_redacted: int = 0                           # events in which it replaced at least one


def _no_constants(name: str):
    raise ValueError(f"{name} is not valid JSON")


def decode_batch(body: bytes, max_events: int) -> list[Any]:
    """The `events` list of a request body: strict UTF-8 JSON (no byte-order mark; `json.loads` on bytes would also
    take UTF-16 and UTF-32). Raises BadRequest 400 (not UTF-8 JSON, wrong shape) or 413 (too many)."""
    if body.startswith(b"\xef\xbb\xbf"):
        raise BadRequest(400, "invalid_json", "body starts with a byte-order mark: send UTF-8 JSON without one")
    try:
        doc = json.loads(body.decode("utf-8"), parse_constant=_no_constants)
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


def _refusal(event, adm: Admission) -> tuple[str, str, str] | None:
    """(code, field, reason) when the sender may not write `event`, else None."""
    if not adm.may_write_org(event.org_id):
        return ("org_mismatch", "org_id", f"org_id {echo(event.org_id)!r} is not this API key's org "
                                          f"({adm.org!r}); a key writes only for its own org")
    if event.event_type == TRAJECTORY and adm.role not in WRITES_TRAJECTORIES:
        return ("role_forbidden", "event_type", f"only a key with role 'serving' may write trajectory events "
                                                f"(this key's role is {adm.role!r})")
    skew = (event.event_time - adm.received_time).total_seconds()
    if skew > adm.max_future_s:
        return ("event_time_future", "event_time", f"event_time is {skew:.0f} s after the collector's receipt "
                                                   f"time; at most {adm.max_future_s:g} s is accepted (is the "
                                                   "client's clock right?)")
    if -skew > adm.max_past_s:
        return ("event_time_past", "event_time", f"event_time is {-skew:.0f} s before the collector's receipt "
                                                 f"time; at most {adm.max_past_s:g} s is accepted")
    return None


def validate_events(items: list[Any], adm: Admission) -> ValidatedBatch:
    """Validate each item against its schema and what `adm` allows; valid events are redacted again (when
    `adm.redact`), get `received_time` and become records; invalid ones become rejections."""
    out = ValidatedBatch()
    for i, item in enumerate(items):
        try:
            _precheck(item)
            event = parse_event(item, strict=True)
        except SchemaError as e:
            out.rejected.append(Rejection(i, _event_id(item), echo(e.field), echo(e.reason)))
            out.counts["schema"] += 1
            continue
        except RecursionError:  # pathological nesting inside one event: reject it, never crash
            out.rejected.append(Rejection(i, _event_id(item), "<event>", "nested too deeply"))
            out.counts["schema"] += 1
            continue
        refused = _refusal(event, adm)
        if refused is not None:
            code, fld, reason = refused
            out.rejected.append(Rejection(i, echo(event.event_id), fld, reason))
            out.counts[code] += 1
            continue
        if adm.redact:
            event, n = redact_model(event)
            if n:
                out.secrets_redacted += n
                out.events_redacted += 1
        event.received_time = adm.received_time
        out.records.append(Record.of(event))
    return out
