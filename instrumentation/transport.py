"""How events leave a process: a batch of records to Kafka (or, for clients without Kafka credentials, to the
ingest collector over HTTP -- `instrumentation.collector_client`). Both raise `TransportError` when the batch may
not have been delivered; callers then keep the batch (spool) and retry. A retry can deliver an event twice:
`event_id` is the idempotency key that the archive and the reward job dedupe on.

A transport may set `stamps_received_time = True` (a class attribute) when nothing downstream of it stamps
`received_time` (direct-to-Kafka); the SDK's sender then stamps it. The collector stamps it for HTTP clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from schemas import Event, to_wire, topic_for
from schemas.kafka_clients import KafkaTarget, bootstrap_of, kafka_client_args


class TransportError(RuntimeError):
    """The batch may not have been delivered (broker unreachable, timeout, rejected)."""


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    key: bytes
    value: bytes

    @classmethod
    def of(cls, event: Event) -> "Record":
        """The Kafka record for an event: its family's topic, keyed by user so a user's events stay ordered."""
        return cls(topic_for(event.event_type), event.user_id.encode(), to_wire(event))


class Transport(Protocol):
    def send(self, records: Sequence[Record]) -> None: ...
    def close(self) -> None: ...


class KafkaTransport:
    """kafka-python producer with acks=all. `send` returns only when every record is acknowledged."""

    stamps_received_time = True
    """Events go straight to Kafka, not through the collector: the SDK's sender stamps `received_time`."""

    def __init__(self, bootstrap_servers: KafkaTarget, *, timeout_s: float = 10.0, client_id: str = "rtrl-sdk",
                 linger_ms: int = 5, max_request_size: int = 8 * 1024 * 1024):
        self.bootstrap_servers = bootstrap_of(bootstrap_servers)
        self.timeout_s = timeout_s
        self._kafka = kafka_client_args(bootstrap_servers)  # read now: a missing password fails at start, not per send
        self._conf = dict(acks="all", client_id=client_id, linger_ms=linger_ms,
                          retries=0, max_request_size=max_request_size, request_timeout_ms=int(timeout_s * 1000),
                          max_block_ms=int(timeout_s * 1000), bootstrap_timeout_ms=int(timeout_s * 1000),
                          batch_size=256 * 1024, compression_type=None)
        self._producer = None

    def _connect(self):
        if self._producer is None:
            from kafka import KafkaProducer
            from kafka.errors import KafkaError

            try:
                self._producer = KafkaProducer(**self._kafka, **self._conf)
            except (KafkaError, OSError) as e:
                raise TransportError(f"cannot reach Kafka at {self.bootstrap_servers}: {e}") from e
        return self._producer

    def send(self, records: Sequence[Record]) -> None:
        from kafka.errors import KafkaError

        producer = self._connect()
        try:
            futures = [producer.send(r.topic, key=r.key, value=r.value) for r in records]
            producer.flush(timeout=self.timeout_s)
            for f in futures:
                f.get(timeout=self.timeout_s)
        except (KafkaError, OSError, AssertionError) as e:
            self._reset()
            raise TransportError(f"Kafka send failed: {type(e).__name__}: {e}") from e

    def _reset(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=0)
            except Exception:  # noqa: BLE001 -- closing a broken producer must not mask the send error
                pass
            self._producer = None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=self.timeout_s)
            self._producer = None


def kafka_reachable(bootstrap_servers: KafkaTarget, timeout_s: float = 2.0, client_id: str = "rtrl-probe") -> bool:
    """True when the cluster answers a metadata request (list topics) within `timeout_s`."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    ms = int(timeout_s * 1000)
    args = kafka_client_args(bootstrap_servers)  # outside the try: a config error (no password) is not "unreachable"
    try:
        admin = KafkaAdminClient(**args, client_id=client_id, request_timeout_ms=ms,
                                 bootstrap_timeout_ms=ms)
    except (KafkaError, OSError, ValueError):
        return False
    try:
        admin.list_topics()
        return True
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()
