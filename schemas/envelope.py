"""The envelope every event carries (docs/events.md) and the error raised on bad input."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timezone
from typing import Annotated, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

ID = Field(min_length=1, max_length=128)
SAFE_ID = r"^[!-~]+$"
"""Ids (users, orgs, workspaces, sessions, requests, files, versions): visible ASCII, no space and no control
character, so an id is safe as a Kafka key, a file name part and in a terminal."""
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""C0 and C1 control characters and DEL, except tab, line feed and carriage return (which code and prose use)."""


def strip_controls(text):
    """`text` without control characters (NUL, terminal escapes, ...); tabs and line breaks stay. Anything but a
    string is left to the type check."""
    return CONTROL.sub("", text) if isinstance(text, str) else text


Text = Annotated[str, BeforeValidator(strip_controls)]
"""Free text a client or a model wrote (a follow-up, an error message): stored without control characters."""


class SchemaError(ValueError):
    """Bad input. `field` names the offending field (dotted path), `reason` says why."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"{name} must carry a timezone (UTC expected), got a naive datetime")
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:  # e.g. 9999-12-31T23:59:59-14:00: a valid datetime whose UTC instant is past year 9999
        raise ValueError(f"{name} is outside the representable range once converted to UTC (years 1-9999)") from None


class Event(BaseModel):
    """Envelope fields shared by every event type.

    `event_id` is made by the client and is the idempotency key: a retried or replayed event keeps its id.
    `received_time` is stamped by the ingest collector (or the SDK's sender for direct-to-Kafka clients).
    Subclasses list in `CONTENT_FIELDS` what is trainable content: a `privacy_mode` event must leave them empty.
    """

    # allow_inf_nan=False: an infinite log-prob, latency or temperature is malformed (JSON has no infinity, but
    # Python's parser reads 1e999 as one); it would poison importance weights and latency metrics downstream.
    model_config = ConfigDict(extra="forbid", frozen=False, str_max_length=1_000_000, allow_inf_nan=False)

    EVENT_TYPE: ClassVar[str] = ""
    SCHEMA_VERSION: ClassVar[int] = 1
    CONTENT_FIELDS: ClassVar[tuple[str, ...]] = ()
    PRODUCERS: ClassVar[str] = ""
    CONSUMERS: ClassVar[str] = ""

    event_id: str = Field(description="Client-made UUID; the idempotency key.", json_schema_extra={"format": "uuid"})
    event_type: str = Field(description="Which event this is; selects the model.")
    schema_version: int = Field(ge=1, description="Version of this event type's schema the producer wrote.")
    event_time: datetime = Field(description="Client clock, UTC, when the thing happened.")
    received_time: datetime | None = Field(default=None, description="Set by the collector/sender on receipt, UTC.")
    user_id: str = Field(min_length=1, max_length=128, pattern=SAFE_ID, description="Pseudonymous user id.")
    org_id: str = Field(min_length=1, max_length=128, pattern=SAFE_ID)
    workspace_id: str = Field(min_length=1, max_length=128, pattern=SAFE_ID)
    session_id: str = Field(min_length=1, max_length=128, pattern=SAFE_ID)
    privacy_mode: bool = Field(default=False, description="When true the event carries no trainable content.")
    client_version: str = Field(min_length=1, max_length=64, pattern=SAFE_ID)

    @field_validator("event_id")
    @classmethod
    def _event_id_is_uuid(cls, v: str) -> str:
        try:
            return str(uuid.UUID(v))
        except (ValueError, AttributeError, TypeError):
            raise ValueError("must be a UUID string") from None

    @field_validator("event_time")
    @classmethod
    def _event_time_utc(cls, v: datetime) -> datetime:
        return _utc(v, "event_time")

    @field_validator("received_time")
    @classmethod
    def _received_time_utc(cls, v: datetime | None) -> datetime | None:
        return None if v is None else _utc(v, "received_time")

    @model_validator(mode="after")
    def _type_version_and_privacy(self):
        if self.event_type != self.EVENT_TYPE:
            raise ValueError(f"event_type must be {self.EVENT_TYPE!r} for this model, got {self.event_type!r}")
        if self.schema_version != self.SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {self.schema_version} must be upgraded to {self.SCHEMA_VERSION} before validation"
            )
        if self.privacy_mode:
            for name in self.CONTENT_FIELDS:
                if getattr(self, name):
                    raise ValueError(f"privacy_mode event must not carry content field {name!r}")
        return self

    def without_content(self) -> "Event":
        """A copy with every content field emptied and `privacy_mode` set: what privacy mode may send."""
        empty = {name: type(getattr(self, name))() for name in self.CONTENT_FIELDS}
        return self.model_copy(update={**empty, "privacy_mode": True})

    @classmethod
    def new_id(cls) -> str:
        return str(uuid.uuid4())
