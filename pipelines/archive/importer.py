"""Import event frames into the archive layout, committed by manifests exactly like the archiver's batches: for
data engineers bringing an exported event log (or a generated one, as the reward benchmark does) to `rtrl replay`.
Offsets are synthetic, per topic, partition 0, under the import's own cluster id (`_manifests/<cluster_id>/`).

A frame may be at an older schema version of its event type: when the versions since only added fields, the
missing columns take their defaults (`schemas.arrow.fill_defaults`); otherwise rows are upgraded one by one through
`schemas.compat`'s upgraders. Either way the files hold the current Arrow schema.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipelines.archive import layout
from pipelines.archive.manifest import Manifest, write_manifest
from pipelines.archive.state import archived_positions
from pipelines.archive.writer import EVENTS, PROVENANCE, FileEntry, write_table
from schemas import EVENT_TYPES, arrow_schema, from_arrow, storage, to_arrow, topic_for
from schemas.arrow import fill_defaults
from schemas.compat import is_additive


def current_table(frame: pl.DataFrame, event_type: str) -> pa.Table:
    """`frame` (one event type, any schema version it was written at, with or without `event_date`) as a table in
    the current Arrow schema of `event_type`, columns in schema order. Raises ValueError for a version newer than
    this code knows, or a missing column that has no default."""
    cls, target = EVENT_TYPES[event_type], arrow_schema(event_type)
    if "event_date" not in frame.columns:
        frame = frame.with_columns(event_date=pl.col("event_time").dt.convert_time_zone("UTC").dt.date())
    table = frame.to_arrow()
    versions = set(frame["schema_version"].unique().to_list())
    current = cls.SCHEMA_VERSION
    if any(not isinstance(v, int) or v > current or v < 1 for v in versions):
        raise ValueError(f"{event_type}: schema_version {sorted(versions, key=str)} outside 1..{current}, the "
                         "versions this code reads")
    if versions <= {current} and table.column_names == target.names:
        return table.cast(target)
    if all(is_additive(event_type, v, current) for v in versions):
        filled = fill_defaults(table, cls)
        missing = [n for n in target.names if n not in filled.column_names]
        if missing:
            raise ValueError(f"{event_type}: the frame lacks column(s) {missing}, which have no default")
        index = filled.schema.get_field_index("schema_version")
        filled = filled.set_column(index, "schema_version", pa.repeat(pa.scalar(current, pa.int64()),
                                                                      filled.num_rows))
        return filled.select(target.names).cast(target)  # cast needs the columns in schema order
    return to_arrow(from_arrow(table), event_type)  # an upgrader in between: row by row through the models


def import_frames(root: str | Path, frames: dict[str, pl.DataFrame], cluster_id: str = "import",
                  chunk_rows: int = 500_000, offsets: dict[str, int] | None = None) -> int:
    """Write every frame's rows as committed archive files; returns the number of events imported.

    `offsets` (topic -> next synthetic offset, updated in place) says where each topic's synthetic offsets go on;
    without it they go on after what the archive already holds under `cluster_id` (from 0 in a new one), so a
    second import under the same id appends instead of overwriting the first one's files."""
    root = storage.normalize(root)
    if offsets is None:
        offsets = {name.rsplit("/", 1)[0]: n for name, n in archived_positions(root, cluster_id).items()
                   if name.endswith("/0")}
    by_topic: dict[str, list[tuple[str, pl.DataFrame]]] = defaultdict(list)
    for event_type, frame in sorted(frames.items()):
        if frame.height:
            by_topic[topic_for(event_type)].append((event_type, frame))
    total = 0
    for topic, parts in sorted(by_topic.items()):
        offset = offsets.get(topic, 0)
        for event_type, frame in parts:
            for start in range(0, frame.height, chunk_rows):
                chunk = pl.from_arrow(current_table(frame.slice(start, chunk_rows), event_type))
                first, last = offset, offset + chunk.height - 1
                files = []
                for (day,), rows in sorted(chunk.partition_by("event_date", as_dict=True).items()):
                    table = rows.to_arrow().cast(arrow_schema(event_type))
                    n = table.num_rows
                    prov = (pa.array([topic] * n, pa.string()), pa.array([0] * n, pa.int32()),
                            pa.array(range(first, first + n), pa.int64()))
                    for f, col in zip(PROVENANCE, prov):
                        table = table.append_column(f, col)
                    rel = layout.data_file(event_type, day, topic, 0, first, last, cluster_id)
                    size = write_table(root, rel, table, "zstd")
                    files.append(FileEntry(rel, EVENTS, n, size, event_type, day.isoformat()))
                write_manifest(root, Manifest(cluster_id, topic, 0, first, last, chunk.height, chunk.height, 0, {},
                                              files))
                offset = last + 1
                total += chunk.height
        offsets[topic] = offset
    return total
