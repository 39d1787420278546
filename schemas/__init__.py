"""Event contracts shared by every rtrl component.

`schemas` depends on nothing else in rtrl. Every other package may import it; components meet through these
types, the Kafka topics named here, and the Arrow schemas used for Parquet.

Public API:
    EVENT_TYPES, Event, SchemaError       -- the models and the error raised on bad input
    parse_event, parse_wire, to_wire      -- dict / wire (JSON bytes) <-> model, upgrading older versions
    arrow_schema, to_arrow, from_arrow    -- model <-> Arrow (the on-disk Parquet schema)
    topic_for, TOPICS, DEAD_LETTER_TOPIC  -- where each event type travels
"""

from schemas.envelope import Event, SchemaError
from schemas.events import EVENT_TYPES, CURRENT_VERSIONS
from schemas.wire import parse_event, parse_wire, to_wire
from schemas.arrow import arrow_schema, to_arrow, from_arrow
from schemas.topics import TOPICS, DEAD_LETTER_TOPIC, TELEMETRY_TOPICS, topic_for

__all__ = [
    "Event", "SchemaError", "EVENT_TYPES", "CURRENT_VERSIONS",
    "parse_event", "parse_wire", "to_wire",
    "arrow_schema", "to_arrow", "from_arrow",
    "TOPICS", "DEAD_LETTER_TOPIC", "TELEMETRY_TOPICS", "topic_for",
]
