"""ParseEventsFn: raw events (wire bytes, JSON text or dicts) -> validated `Event`s; bad ones to dead letters."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.metrics import Metrics

from schemas import SchemaError, parse_event, parse_wire

DEAD_LETTER = "dead_letter"


class ParseEventsFn(beam.DoFn):
    """Main output: `Event`. Tagged output `dead_letter`: {"reason", "field", "raw"} with the reason counted as
    `rewards/dead_letter_<field>`."""

    def __init__(self):
        self.parsed = Metrics.counter("rewards", "events_parsed")

    def process(self, raw):
        try:
            event = parse_event(raw) if isinstance(raw, dict) else parse_wire(raw)
        except SchemaError as e:
            Metrics.counter("rewards", f"dead_letter_{e.field.split('.')[0]}").inc()
            text = raw if isinstance(raw, str) else (raw.decode("utf-8", "replace") if isinstance(raw, bytes)
                                                     else json.dumps(raw, default=str))
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, {"field": e.field, "reason": e.reason, "raw": text[:10_000]})
            return
        self.parsed.inc()
        yield event
