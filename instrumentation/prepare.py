"""What happens to an event before it leaves the client: privacy mode, secret redaction, serialization.

Privacy mode (the client's `sdk.privacy_mode`, or the event's own `privacy_mode`) empties the event's
`CONTENT_FIELDS` (`Event.without_content()`). Redaction then walks every string in the event -- nested models,
lists and dicts included (`Trajectory.tool_calls[].error`, `FollowupMessage.text`,
`ToolCallResult.error_message`, ...) -- except `NOT_REDACTED`: identifiers and hashes that downstream joins on
and that the SDK or serving made, never user text. Enum values are never touched. New free-text fields in a
future schema are therefore redacted without a change here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Any

from pydantic import BaseModel

from instrumentation.redaction import redact
from instrumentation.transport import Record
from schemas import Event

NOT_REDACTED = frozenset({
    "event_id", "event_type", "user_id", "org_id", "workspace_id", "session_id", "client_version",
    "request_id", "previous_request_id", "policy_version", "arm", "file_id", "new_fingerprints", "line_fingerprints",
})
"""Field names (at any depth) whose strings are ids or fingerprints, not free text."""


def _redact_value(value: Any) -> tuple[Any, int]:
    """`value` with secrets redacted in every string it holds, and the count; the same object if unchanged."""
    if isinstance(value, str):
        return redact(value) if not isinstance(value, Enum) else (value, 0)
    if isinstance(value, BaseModel):
        return redact_model(value)
    if isinstance(value, (list, tuple)):
        if not value or isinstance(value[0], (int, float, bool)):
            return value, 0  # token ids, logprobs: no text (and long)
        total, items = 0, []
        for item in value:
            new, n = _redact_value(item)
            items.append(new)
            total += n
        return (type(value)(items) if total else value), total
    if isinstance(value, dict):
        total, out = 0, {}
        for k, v in value.items():
            out[k], n = _redact_value(v)
            total += n
        return (out if total else value), total
    return value, 0


def redact_model(model: BaseModel) -> tuple[BaseModel, int]:
    """A copy of `model` with secrets redacted in its free-text fields (the same object if there were none)."""
    updates, total = {}, 0
    for name in type(model).model_fields:
        if name in NOT_REDACTED:
            continue
        value = getattr(model, name)
        new, n = _redact_value(value)
        if n:
            updates[name] = new
            total += n
    return (model.model_copy(update=updates) if updates else model), total


def prepare(event: Event, *, privacy_mode: bool, redact_secrets: bool,
            stamp_received: bool = False) -> tuple[Record, int]:
    """The record to send for `event` and how many secrets were redacted in it. `event` itself is not changed."""
    if privacy_mode or event.privacy_mode:
        event = event.without_content()
    redacted = 0
    if redact_secrets:
        event, redacted = redact_model(event)
    if stamp_received and event.received_time is None:
        event = event.model_copy(update={"received_time": datetime.now(timezone.utc)})
    return Record.of(event), redacted
