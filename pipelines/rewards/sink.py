"""WriteRewardTable: reward rows -> Parquet partitioned by policy_version and cycle window, idempotently.

Layout: `<out>/policy_version=<v>/window=<label>/part-0.parquet`, one file per partition, rows sorted by
request_id (one row per request_id). Each file is written to a temp name, fsynced and renamed over the old one,
so a rerun of the same window replaces the partition whole: never duplicated, never half-written. Streaming runs
write each emitted frame as its own file instead (`WriteRewardParts`, window label = hour of mature time).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import apache_beam as beam
import polars as pl
import pyarrow.parquet as pq

from pipelines.archive.deadletter import dead_letter_table
from schemas.reward_table import ROW_SCHEMA


def partition_dir(out: Path, policy_version: str, window: str) -> Path:
    return out / f"policy_version={policy_version}" / f"window={window}"


def partitions_written(out: str | Path, window: str) -> list[tuple[str, int]]:
    """(file, rows) of every partition of `window` under `out`, sorted by path."""
    return [(str(f), pq.read_metadata(f).num_rows)
            for f in sorted(Path(out).glob(f"policy_version=*/window={window}/part-0.parquet"))]


def write_partition(out: Path, window: str, policy_version: str, frames) -> tuple[str, int]:
    rows = pl.concat(list(frames))
    if rows["request_id"].n_unique() != rows.height:  # a request's row is emitted once; never write it twice
        rows = rows.unique("request_id", keep="first")
    return _write_file(partition_dir(out, policy_version, window), "part-0.parquet", rows.sort("request_id"))


def _write_file(d: Path, name: str, rows: pl.DataFrame) -> tuple[str, int]:
    """Write-then-rename, fsynced: a reader sees the old file or the new one, never half of one."""
    d.mkdir(parents=True, exist_ok=True)
    final, tmp = d / name, d / f".{name}.tmp"
    with open(tmp, "wb") as fh:
        pq.write_table(rows.to_arrow().cast(ROW_SCHEMA), fh, compression="zstd")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return str(final), rows.height


class WriteRewardTable(beam.PTransform):
    """Bounded runs: one `part-0.parquet` per (policy_version, window label = cycle id or replay range)."""

    def __init__(self, out: str | Path, window: str):
        super().__init__()
        self.out, self.window = Path(out), window

    def expand(self, rows):
        out, window = self.out, self.window
        return (rows
                | "ByPolicyVersion" >> beam.FlatMap(
                    lambda f: [(k[0], part) for k, part in f.partition_by("policy_version", as_dict=True).items()])
                | "Group" >> beam.GroupByKey()
                | "Write" >> beam.MapTuple(lambda v, frames: write_partition(out, window, v, frames)))


def write_stream_parts(out: Path, rows: pl.DataFrame) -> list[tuple[str, int]]:
    """One emitted frame of a streaming run -> a file per (policy_version, hour of mature time), named by a hash of
    its request ids: a retried bundle that emits the same rows rewrites the same file (no duplicate), and no
    window has to close before rows reach the table."""
    hour = pl.col("mature_time").dt.truncate("1h").dt.strftime("%Y%m%dT%H%M%SZ")
    written = []
    for (version, label), part in sorted(rows.with_columns(_w=hour).partition_by(
            "policy_version", "_w", as_dict=True).items()):
        part = part.drop("_w").sort("request_id")
        name = "part-s" + hashlib.sha256("\n".join(part["request_id"]).encode()).hexdigest()[:20] + ".parquet"
        written.append(_write_file(partition_dir(out, version, label), name, part))
    return written


class WriteRewardParts(beam.PTransform):
    """Streaming runs: each emitted frame written as it comes (`write_stream_parts`); no grouping, no windows."""

    def __init__(self, out: str | Path):
        super().__init__()
        self.out = Path(out)

    def expand(self, rows):
        out = self.out
        return rows | "WriteParts" >> beam.FlatMap(lambda f: write_stream_parts(out, f))


def write_dead_letters(path: Path, letters, cluster: str) -> int:
    """The cycle's dead letters as Parquet (the archive's dead-letter schema), replaced whole on a rerun."""
    table = dead_letter_table(sorted(letters, key=lambda d: (d.message.topic, d.message.partition,
                                                              d.message.offset)), cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return table.num_rows


def write_carry(directory: Path, batches) -> int:
    by_type: dict[str, list[pl.DataFrame]] = {}
    for b in batches:
        by_type.setdefault(b.event_type, []).append(b.frame)
    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    for t in sorted(by_type):
        f = pl.concat(by_type[t]).unique("event_id", keep="first").sort("event_time", "event_id")
        tmp = directory / f".{t}.parquet.tmp"
        f.write_parquet(tmp)
        os.replace(tmp, directory / f"{t}.parquet")
        n += f.height
    return n
