"""Compaction: a partition's small files merged into files of about `archive.compact_target_bytes`.

A partition here is what a compacted file may mix: data files of one event type, one event date and one Kafka
cluster id (their rows keep their own topic, partition and offset in the provenance columns), or dead-letter or
duplicate files of one cluster id committed on one UTC day. `plan_compaction` decides (pure); `write_compacted`
writes one group's rows, unchanged and in commit order, into one new file. The new file is not part of the
archive until the checkpoint that lists it in place of its inputs is written (`maintenance.py`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.archive import layout
from pipelines.archive.deadletter import DEAD_LETTER_SCHEMA
from pipelines.archive.reader import conform, event_table_schema
from pipelines.archive.records import ArchiveError, CommittedFile
from pipelines.archive.writer import DEAD_LETTERS, DUPLICATE_SCHEMA, DUPLICATES, EVENTS, FileEntry
from schemas import storage

ROW_GROUP_BYTES = 32 * 1024 * 1024   # rows gathered in memory before a row group is written


def group_key(f: CommittedFile) -> tuple[str, ...]:
    """What files may be merged together (see the module docstring)."""
    e = f.entry
    if e.kind == EVENTS:
        return (e.kind, f.cluster_id, e.event_type or "", e.event_date or "")
    return (e.kind, f.cluster_id, f.committed_at[:10])


def plan_compaction(files: list[CommittedFile], target_bytes: int, min_files: int) -> list[list[CommittedFile]]:
    """Groups of files to merge, each into one file. A partition is compacted once it holds at least `min_files`
    files smaller than `target_bytes`; those are packed in commit order into groups of at most `target_bytes`
    (a group is at least two files)."""
    small: dict[tuple[str, ...], list[CommittedFile]] = defaultdict(list)
    for f in files:
        if f.entry.bytes < target_bytes:
            small[group_key(f)].append(f)
    plan = []
    for key in sorted(small):
        candidates = sorted(small[key], key=lambda f: (f.committed_at, f.entry.path))
        if len(candidates) < min_files:
            continue
        group: list[CommittedFile] = []
        size = 0
        for f in candidates:
            if group and size + f.entry.bytes > target_bytes:
                if len(group) >= 2:
                    plan.append(group)
                group, size = [], 0
            group.append(f)
            size += f.entry.bytes
        if len(group) >= 2:
            plan.append(group)
    return plan


def _folder(f: CommittedFile) -> str:
    e = f.entry
    if e.kind == EVENTS:
        return layout.partition_dir(e.event_type, e.event_date)
    return layout.DEAD_LETTER_DIR if e.kind == DEAD_LETTERS else layout.DUPLICATE_DIR


def _schema(f: CommittedFile) -> pa.Schema:
    kind = f.entry.kind
    if kind == EVENTS:
        return event_table_schema(f.entry.event_type)
    return DEAD_LETTER_SCHEMA if kind == DEAD_LETTERS else DUPLICATE_SCHEMA


def _table(root: Path | str, f: CommittedFile, schema: pa.Schema) -> pa.Table:
    table = storage.read_parquet(storage.join(root, f.entry.path))
    if f.entry.kind == EVENTS:
        return conform(table, f.entry.event_type)   # an older schema version's file: at the current one
    return table.select(schema.names).cast(schema)


def write_compacted(root: Path | str, group: list[CommittedFile], seq: int, index: int, compression: str,
                    committed_at: str) -> CommittedFile:
    """Write the rows of `group` (one partition's files) into one durable file named for checkpoint `seq`; returns
    its entry. Raises ArchiveError when the rows read differ from what the manifests recorded."""
    first = group[0]
    schema = _schema(first)
    rel = layout.compacted_file(_folder(first), seq, index, first.cluster_id)
    rows = 0

    def write(out) -> None:
        nonlocal rows
        rows = 0
        with pq.ParquetWriter(out, schema, compression=compression, use_compliant_nested_type=False) as w:
            pending: list[pa.Table] = []
            size = 0
            for f in group:
                t = _table(root, f, schema)
                if t.num_rows != f.entry.rows:
                    raise ArchiveError(f"{f.entry.path} holds {t.num_rows} rows, its manifest says {f.entry.rows}")
                pending.append(t)
                size += t.nbytes
                rows += t.num_rows
                if size >= ROW_GROUP_BYTES:
                    w.write_table(pa.concat_tables(pending))
                    pending, size = [], 0
            if pending:
                w.write_table(pa.concat_tables(pending))

    nbytes = storage.write_atomic(storage.join(root, rel), write)
    entry = FileEntry(rel, first.entry.kind, rows, nbytes, first.entry.event_type, first.entry.event_date)
    return CommittedFile(entry, first.cluster_id, committed_at)
