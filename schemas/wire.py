"""Wire format: one JSON object per event (UTF-8), carrying its own `event_type` and `schema_version`."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from schemas.compat import upgrade
from schemas.envelope import Event, SchemaError
from schemas.events import EVENT_TYPES

MAX_WIRE_BYTES = 4 * 1024 * 1024


def _first_error(err: ValidationError) -> SchemaError:
    e = err.errors(include_url=False)[0]
    field = ".".join(str(p) for p in e.get("loc", ())) or "<event>"
    return SchemaError(field, e.get("msg", "invalid"))


class _Header(BaseModel):
    """What selects the model of a wire message (other fields are skipped)."""

    event_type: str
    schema_version: int


def parse_event(d: Any, strict: bool = False) -> Event:
    """Validate a decoded event (a dict), upgrading older schema versions. Raises SchemaError naming the field.
    `strict` (what the collector admits from clients): JSON's own types only, nothing coerced: `true` is not the
    integer 1, `"3"` is not 3, a number is not a string (ISO times and UUIDs as JSON strings, as the wire has them)."""
    if not isinstance(d, dict):
        raise SchemaError("<event>", f"must be a JSON object, got {type(d).__name__}")
    event_type = d.get("event_type")
    if not isinstance(event_type, str):
        raise SchemaError("event_type", "missing or not a string")
    cls = EVENT_TYPES.get(event_type)
    if cls is None:
        raise SchemaError("event_type", f"unknown event type {event_type!r}; known: {sorted(EVENT_TYPES)}")
    try:
        d = upgrade(d, cls.SCHEMA_VERSION)
    except ValueError as e:
        raise SchemaError("schema_version", str(e)) from None
    if strict:
        try:
            return cls.model_validate_json(json.dumps(d), strict=True)
        except ValidationError as strict_error:
            try:        # the lax pass names the field of what JSON itself refuses (a lone surrogate in a string)
                cls.model_validate(d)
            except ValidationError as e:
                raise _first_error(e) from None
            raise _first_error(strict_error) from None
    try:
        return cls.model_validate(d)
    except ValidationError as e:
        raise _first_error(e) from None


def parse_wire(data: bytes | str) -> Event:
    """Decode and validate one wire message."""
    if len(data) > MAX_WIRE_BYTES:
        raise SchemaError("<event>", f"message of {len(data)} bytes exceeds {MAX_WIRE_BYTES}")
    try:
        head = _Header.model_validate_json(data)
        cls = EVENT_TYPES.get(head.event_type)
        if cls is not None and head.schema_version == cls.SCHEMA_VERSION:
            return cls.model_validate_json(data)  # JSON parsed and validated in one pass (pydantic-core)
    except ValidationError:
        pass  # any error: the dict path below names the field the same way every time
    try:
        d = json.loads(data)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer past Python's digit limit
        raise SchemaError("<event>", f"not valid JSON: {e}") from None
    except RecursionError:  # "[[[[..." a few thousand deep: refused, never a crash of the reader
        raise SchemaError("<event>", "not valid JSON: nested too deeply") from None
    return parse_event(d)


def to_wire(event: Event) -> bytes:
    return event.model_dump_json().encode()
