"""ParseEventsFn: raw messages -> validated `Event`s; the ones that fail go to the dead-letter output.

Dead letters use the archive's vocabulary (`pipelines.archive.deadletter`): a reason code, the offending field, the
validator's words, the original bytes and where they came from -- so the reward job's dead letters and the
archiver's read the same, and Kafka sources keep the topic/partition/offset of each one.
"""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.archive.deadletter import DeadLetter
from pipelines.archive.messages import SourceMessage
from schemas import Event, SchemaError, parse_event, parse_wire

DEAD_LETTER = "dead_letter"


def as_message(raw) -> SourceMessage:
    """Any raw input (Kafka record, wire bytes, JSON text or a decoded dict) as a SourceMessage; inputs without a
    Kafka position (TestStream, files) get topic "" and partition/offset -1."""
    if isinstance(raw, SourceMessage):
        return raw
    if isinstance(raw, (bytes, bytearray)):
        value = bytes(raw)
    elif isinstance(raw, str):
        # surrogatepass: text decoded with errors="surrogateescape" (or JSON escapes) may hold lone surrogates; the
        # dead letter keeps their code units instead of failing to be made
        value = raw.encode("utf-8", "surrogatepass")
    else:  # a decoded JSON value (a dict, or a list/number that is no event)
        try:
            value = json.dumps(raw, default=str).encode()
        except (TypeError, ValueError, RecursionError):  # non-string keys, cycles, absurd nesting: keep its repr
            value = repr(raw).encode("utf-8", "surrogatepass")
    return SourceMessage(topic="", partition=-1, offset=-1, value=value)


def parse_one(raw) -> Event | DeadLetter:
    """One raw input -> its validated `Event`, or the `DeadLetter` saying why it is not one."""
    value = raw.value if isinstance(raw, SourceMessage) else raw
    if value is None:
        return DeadLetter.of(as_message(raw), None)
    try:
        return parse_wire(value) if isinstance(value, (bytes, bytearray, str)) else parse_event(value)
    except SchemaError as e:
        return DeadLetter.of(as_message(raw), e)


class ParseEventsFn(beam.DoFn):
    """Main output: `Event`. Tagged output `dead_letter`: `DeadLetter`, counted as `rewards/dead_letter_<reason>`."""

    def __init__(self):
        self.parsed = Metrics.counter("rewards", "events_parsed")

    def process(self, raw):
        out = parse_one(raw)
        if isinstance(out, DeadLetter):
            Metrics.counter("rewards", f"dead_letter_{out.reason}").inc()
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, out)
        else:
            self.parsed.inc()
            yield out
