"""One batch in flight: consumed messages sorted into events, duplicates and dead letters, per partition.

Nothing here touches disk or Kafka; `Archiver.flush` commits a batch when `flush_due` says so (by messages, bytes
or age). Duplicates (same org_id and event_id) are dropped within the batch and against the `RecentIds` window of
what is already archived; the first copy wins. Each dropped copy's identity, times and Kafka position are kept
(`duplicate_copies`, written as the batch's duplicates file), so a replay counts late and duplicate copies exactly
as the live reward cycles did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.archive.deadletter import DeadLetter
from pipelines.archive.dedupe import RecentIds, tenant_key
from pipelines.archive.messages import SourceMessage
from schemas import Event, SchemaError, parse_wire


@dataclass
class PartitionBatch:
    """What one partition contributed to a batch: offsets `first_offset..last_offset` (inclusive)."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    events: list[tuple[Event, int]] = field(default_factory=list)  # (event, offset), in offset order
    dead_letters: list[DeadLetter] = field(default_factory=list)
    duplicate_copies: list[tuple[Event, int]] = field(default_factory=list)  # (copy, offset): dropped, recorded
    duplicates: int = 0
    messages: int = 0

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def flush_due(messages: int, nbytes: int, age_s: float, max_messages: int, max_bytes: int,
              max_seconds: float) -> bool:
    """Whether a batch of `messages` messages (`nbytes` bytes of values), the first consumed `age_s` seconds ago,
    is committed now: when it reaches `max_messages` messages or `max_bytes` bytes, or is `max_seconds` old."""
    return messages > 0 and (messages >= max_messages or nbytes >= max_bytes or age_s >= max_seconds)


class Batch:
    def __init__(self, window: RecentIds):
        self.window = window
        self.partitions: dict[tuple[str, int], PartitionBatch] = {}
        self.event_ids: set[tuple[str, str]] = set()      # tenant keys: (org_id, event_id)
        self.messages = 0
        self.bytes = 0            # of the messages' values

    def __len__(self) -> int:
        return self.messages

    def add(self, m: SourceMessage) -> None:
        pb = self.partitions.get(m.tp)
        if pb is None:
            pb = self.partitions[m.tp] = PartitionBatch(m.topic, m.partition, m.offset, m.offset)
        if m.offset <= pb.last_offset and pb.messages:
            raise ValueError(f"{m.topic}/{m.partition}: offset {m.offset} after {pb.last_offset} (not increasing)")
        pb.last_offset = m.offset
        pb.messages += 1
        self.messages += 1
        self.bytes += len(m.value) if m.value else 0
        if m.value is None:
            pb.dead_letters.append(DeadLetter.of(m, None))
            return
        try:
            event = parse_wire(m.value)
        except SchemaError as e:
            pb.dead_letters.append(DeadLetter.of(m, e))
            return
        key = tenant_key(event)
        if key in self.event_ids or key in self.window:
            pb.duplicates += 1
            pb.duplicate_copies.append((event, m.offset))
            return
        self.event_ids.add(key)
        pb.events.append((event, m.offset))

    @property
    def events(self) -> int:
        return sum(len(pb.events) for pb in self.partitions.values())

    @property
    def dead_letters(self) -> list[DeadLetter]:
        return [d for pb in self.partitions.values() for d in pb.dead_letters]
