"""Parquet files of one partition's batch: one file per (event type, event date), plus its dead letters.

Each file is written durably (`schemas.storage.write_parquet`: locally temp name, fsync, rename, fsync dir; in an
object store one upload that appears whole) but is not yet part of the archive: only the
batch manifest written after it makes it so (`manifest.py`). The on-disk schema is `schemas.arrow_schema(type)`
followed by the provenance columns `_topic`, `_partition`, `_offset` (where in Kafka the row came from).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa

from pipelines.archive import layout
from pipelines.archive.batch import PartitionBatch
from pipelines.archive.deadletter import dead_letter_table
from schemas import Event, storage, to_arrow

PROVENANCE = (pa.field("_topic", pa.string(), nullable=False), pa.field("_partition", pa.int32(), nullable=False),
              pa.field("_offset", pa.int64(), nullable=False))
PROVENANCE_COLUMNS = tuple(f.name for f in PROVENANCE)

EVENTS = "events"
DEAD_LETTERS = "dead_letters"
DUPLICATES = "duplicates"
DUPLICATE_SCHEMA = pa.schema([pa.field("event_type", pa.string(), nullable=False),
                              pa.field("event_id", pa.string(), nullable=False),
                              pa.field("event_time", pa.timestamp("us", "UTC"), nullable=False),
                              pa.field("received_time", pa.timestamp("us", "UTC")), *PROVENANCE])


@dataclass(frozen=True)
class FileEntry:
    """One file a manifest lists. `path` is relative to the archive root."""

    path: str
    kind: str                     # EVENTS | DEAD_LETTERS | DUPLICATES
    rows: int
    bytes: int
    event_type: str | None = None
    event_date: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict) -> "FileEntry":
        return cls(**d)


def events_table(events: list[tuple[Event, int]], event_type: str, topic: str, partition: int) -> pa.Table:
    """Arrow table of events of one type with the provenance columns appended."""
    table = to_arrow([e for e, _ in events], event_type)
    n = table.num_rows
    cols = (pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
            pa.array([o for _, o in events], pa.int64()))
    for f, col in zip(PROVENANCE, cols):
        table = table.append_column(f, col)
    return table


def duplicates_table(copies: list[tuple[Event, int]], topic: str, partition: int) -> pa.Table:
    """The dropped duplicate copies of a batch: what a replay needs to count them (not their payloads)."""
    return pa.table({"event_type": [e.event_type for e, _ in copies], "event_id": [e.event_id for e, _ in copies],
                     "event_time": [e.event_time for e, _ in copies],
                     "received_time": [e.received_time for e, _ in copies],
                     "_topic": [topic] * len(copies), "_partition": [partition] * len(copies),
                     "_offset": [o for _, o in copies]}, schema=DUPLICATE_SCHEMA)


def write_table(root: Path | str, rel: str, table: pa.Table, compression: str = "zstd") -> int:
    """Write one archive file (root-relative `rel`) atomically; returns its size in bytes."""
    # Non-"compliant" list naming keeps Arrow's `item` child name, so the file's schema equals the Arrow schema.
    return storage.write_parquet(storage.join(root, rel), table, compression=compression,
                                 use_compliant_nested_type=False)



def write_partition_files(root: Path | str, pb: PartitionBatch, cluster_id: str, compression: str = "zstd") -> list[FileEntry]:
    """Write the batch's data files (and dead-letter file) durably; return what the manifest must list."""
    groups: dict[tuple[str, date], list[tuple[Event, int]]] = defaultdict(list)
    for event, offset in pb.events:
        groups[(event.event_type, event.event_time.date())].append((event, offset))
    entries = []
    for (event_type, day), events in sorted(groups.items()):
        rel = layout.data_file(event_type, day, pb.topic, pb.partition, pb.first_offset, pb.last_offset, cluster_id)
        size = write_table(root, rel, events_table(events, event_type, pb.topic, pb.partition), compression)
        entries.append(FileEntry(rel, EVENTS, len(events), size, event_type, day.isoformat()))
    if pb.duplicate_copies:
        rel = layout.duplicate_file(pb.topic, pb.partition, pb.first_offset, pb.last_offset, cluster_id)
        size = write_table(root, rel, duplicates_table(pb.duplicate_copies, pb.topic, pb.partition), compression)
        entries.append(FileEntry(rel, DUPLICATES, len(pb.duplicate_copies), size))
    if pb.dead_letters:
        rel = layout.dead_letter_file(pb.topic, pb.partition, pb.first_offset, pb.last_offset, cluster_id)
        size = write_table(root, rel, dead_letter_table(pb.dead_letters, cluster_id), compression)
        entries.append(FileEntry(rel, DEAD_LETTERS, len(pb.dead_letters), size))
    return entries
