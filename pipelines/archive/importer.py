"""Import event frames (already in the Arrow schema of `schemas/`) into the archive layout, committed by
manifests exactly like the archiver's batches: for data engineers bringing an exported event log (or a generated
one, as the reward benchmark does) to `rtrl replay`. Offsets are synthetic, per topic, partition 0."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.archive import layout
from pipelines.archive.durable import write_durably
from pipelines.archive.manifest import Manifest, write_manifest
from pipelines.archive.writer import EVENTS, PROVENANCE, FileEntry
from schemas import arrow_schema, topic_for


def import_frames(root: str | Path, frames: dict[str, pl.DataFrame], cluster_id: str = "import",
                  chunk_rows: int = 500_000) -> int:
    """Write every frame's rows as committed archive files; returns the number of events imported."""
    root = Path(root)
    by_topic: dict[str, list[tuple[str, pl.DataFrame]]] = defaultdict(list)
    for event_type, frame in sorted(frames.items()):
        if frame.height:
            by_topic[topic_for(event_type)].append((event_type, frame))
    total = 0
    for topic, parts in sorted(by_topic.items()):
        offset = 0
        for event_type, frame in parts:
            for start in range(0, frame.height, chunk_rows):
                chunk = frame.slice(start, chunk_rows)
                first, last = offset, offset + chunk.height - 1
                files = []
                for (day,), rows in sorted(chunk.with_columns(_day=pl.col("event_time").dt.date())
                                           .partition_by("_day", as_dict=True).items()):
                    table = rows.drop("_day").to_arrow().cast(arrow_schema(event_type))
                    n = table.num_rows
                    prov = (pa.array([topic] * n, pa.string()), pa.array([0] * n, pa.int32()),
                            pa.array(range(first, first + n), pa.int64()))
                    for f, col in zip(PROVENANCE, prov):
                        table = table.append_column(f, col)
                    rel = layout.data_file(event_type, day, topic, 0, first, last, cluster_id)
                    size = write_durably(root / rel, lambda fh, t=table: pq.write_table(
                        t, fh, compression="zstd", use_compliant_nested_type=False))
                    files.append(FileEntry(rel, EVENTS, n, size, event_type, day.isoformat()))
                write_manifest(root, Manifest(cluster_id, topic, 0, first, last, chunk.height, chunk.height, 0, {},
                                              files))
                offset = last + 1
                total += chunk.height
    return total
