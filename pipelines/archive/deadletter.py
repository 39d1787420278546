"""Messages that do not parse or validate: why, and the record kept of them.

Every bad message becomes a `DeadLetter`: the original bytes plus a reason code (a small fixed vocabulary, what
stats count by), the offending field and the validator's words. The archiver writes them to the dead-letter topic
(value = the original bytes, the rest in headers) and to `<root>/_dead_letter/` Parquet (`DEAD_LETTER_SCHEMA`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol, Sequence

import pyarrow as pa

from pipelines.archive.messages import SourceMessage
from schemas import SchemaError
from schemas.kafka_clients import KafkaTarget, kafka_client_args

# Reason codes (stats count by these).
EMPTY = "empty_message"            # no value (a tombstone)
INVALID_JSON = "invalid_json"      # not UTF-8 JSON
TOO_LARGE = "too_large"            # over schemas.wire.MAX_WIRE_BYTES
NOT_AN_OBJECT = "not_an_object"    # JSON, but not an object
UNKNOWN_TYPE = "unknown_event_type"
BAD_VERSION = "unsupported_schema_version"
INVALID_FIELD = "invalid_field"    # a field failed validation
REASONS = (EMPTY, INVALID_JSON, TOO_LARGE, NOT_AN_OBJECT, UNKNOWN_TYPE, BAD_VERSION, INVALID_FIELD)

HEADER_PREFIX = "rtrl.dlq."

DEAD_LETTER_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("kafka_timestamp", pa.timestamp("ms", tz="UTC")),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("field", pa.string(), nullable=False),
    pa.field("detail", pa.string(), nullable=False),
    pa.field("cluster_id", pa.string(), nullable=False),
], metadata={b"rtrl.table": b"dead_letter"})


def reason_code(err: SchemaError) -> str:
    if err.field == "<event>":  # a whole-message problem, or a cross-field rule of the model
        if err.reason.startswith("not valid JSON"):
            return INVALID_JSON
        if err.reason.startswith("must be a JSON object"):
            return NOT_AN_OBJECT
        if err.reason.startswith("message of") and "exceeds" in err.reason:
            return TOO_LARGE
        return INVALID_FIELD
    if err.field == "event_type":
        return UNKNOWN_TYPE
    if err.field == "schema_version":
        return BAD_VERSION
    return INVALID_FIELD


@dataclass(frozen=True, slots=True)
class DeadLetter:
    message: SourceMessage
    reason: str
    field: str
    detail: str

    @classmethod
    def of(cls, message: SourceMessage, err: SchemaError | None) -> "DeadLetter":
        if err is None:
            return cls(message, EMPTY, "<event>", "message has no value")
        return cls(message, reason_code(err), err.field, str(err))

    def headers(self, cluster_id: str) -> list[tuple[str, bytes]]:
        m = self.message
        return [(HEADER_PREFIX + k, str(v).encode()) for k, v in (
            ("reason", self.reason), ("field", self.field), ("detail", self.detail[:1000]),
            ("source_topic", m.topic), ("source_partition", m.partition), ("source_offset", m.offset),
            ("source_cluster_id", cluster_id))]


def dead_letter_table(letters: Sequence[DeadLetter], cluster_id: str) -> pa.Table:
    def ts(ms: int | None):
        return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)

    rows = [{"topic": d.message.topic, "partition": d.message.partition, "offset": d.message.offset,
             "key": d.message.key, "value": d.message.value, "kafka_timestamp": ts(d.message.timestamp_ms),
             "reason": d.reason, "field": d.field, "detail": d.detail, "cluster_id": cluster_id} for d in letters]
    return pa.Table.from_pylist(rows, schema=DEAD_LETTER_SCHEMA)


class DeadLetterSink(Protocol):
    """Where dead letters are published (the dead-letter topic). `publish` returns once they are acknowledged."""

    def publish(self, letters: Sequence[DeadLetter], cluster_id: str) -> None: ...
    def close(self) -> None: ...


class NullSink:
    """Publishes nowhere (unit tests, or an archive rebuilt from a log without a dead-letter topic)."""

    def publish(self, letters: Sequence[DeadLetter], cluster_id: str) -> None:
        pass

    def close(self) -> None:
        pass


class KafkaDeadLetterSink:
    """Publishes dead letters to the dead-letter topic (acks=all): value = the original bytes, key = the original
    key, headers `rtrl.dlq.*` = reason, field, detail, source topic/partition/offset/cluster id. At least once: a
    crash after publishing and before the batch's manifest publishes them again on restart (the headers identify
    the source record, so consumers can dedupe)."""

    def __init__(self, bootstrap_servers: KafkaTarget, topic: str, timeout_s: float = 30.0):
        from kafka import KafkaProducer

        self.topic = topic
        self.timeout_s = timeout_s
        self._producer = KafkaProducer(**kafka_client_args(bootstrap_servers), acks="all", linger_ms=5,
                                       client_id="rtrl-archiver-dlq", max_request_size=8 * 1024 * 1024)

    def publish(self, letters: Sequence[DeadLetter], cluster_id: str) -> None:
        futures = [self._producer.send(self.topic, key=d.message.key, value=d.message.value,
                                       headers=d.headers(cluster_id)) for d in letters]
        self._producer.flush(timeout=self.timeout_s)
        for f in futures:
            f.get(timeout=self.timeout_s)

    def close(self) -> None:
        self._producer.close(timeout=self.timeout_s)
