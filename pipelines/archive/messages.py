"""The unit the archiver consumes: one Kafka record, independent of the Kafka client (unit tests build lists)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SourceMessage:
    topic: str
    partition: int
    offset: int
    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = field(default=())

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def tp_name(tp: tuple[str, int]) -> str:
    """'topic/partition', the key positions use in stats and JSON."""
    return f"{tp[0]}/{tp[1]}"
