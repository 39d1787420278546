"""The reward table sink: reward rows -> Parquet partitioned by policy_version and window, idempotently.

Layout: `<out>/policy_version=<v>/window=<label>/part-0.parquet`, one file per partition, rows sorted by
request_id (one row per request_id). `out` is a path or an object-store URL (schemas.storage); each file is
written atomically, so a rerun of the same window replaces the partition whole: never duplicated, never
half-written. Bounded runs write one file per partition (`write_partition`, from pipelines/rewards/bounded.py);
streaming runs write each emitted frame as its own file instead (`WriteRewardParts`, window label = hour of
mature time).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import apache_beam as beam
import polars as pl

from pipelines.archive.deadletter import dead_letter_table
from schemas import storage
from schemas.reward_table import OUTCOME_SCHEMA, ROW_SCHEMA, outcome_table
from schemas.storage import Location


def partition_dir(out: Location, policy_version: str, window: str) -> Path | str:
    return storage.join(out, f"policy_version={policy_version}", f"window={window}")


def write_partition(out: Location, window: str, policy_version: str, frames, outcomes: bool = False) -> tuple[str, int]:
    """One partition of the reward table `out`, or of its task-outcome table with `outcomes`."""
    rows = pl.concat(list(frames))
    if rows["request_id"].n_unique() != rows.height:  # a request's row is emitted once; never write it twice
        rows = rows.unique("request_id", keep="first")
    if outcomes:
        return _write_file(partition_dir(outcome_table(out), policy_version, window), "part-0.parquet",
                           rows.sort("request_id"), OUTCOME_SCHEMA)
    return _write_file(partition_dir(out, policy_version, window), "part-0.parquet", rows.sort("request_id"))


def _write_file(d: Location, name: str, rows: pl.DataFrame, schema=ROW_SCHEMA) -> tuple[str, int]:
    """Atomic (schemas.storage): a reader sees the old file or the new one, never half of one."""
    final = storage.join(d, name)
    storage.write_parquet(final, rows.to_arrow().cast(schema), compression="zstd")
    return str(final), rows.height


def write_stream_parts(out: Location, rows: pl.DataFrame, schema=ROW_SCHEMA) -> list[tuple[str, int]]:
    """One emitted frame of a streaming run -> a file per (policy_version, hour of mature time), named by a hash of
    its request ids: a retried bundle that emits the same rows rewrites the same file (no duplicate), and no
    window has to close before rows reach the table."""
    hour = pl.col("mature_time").dt.truncate("1h").dt.strftime("%Y%m%dT%H%M%SZ")
    written = []
    for (version, label), part in sorted(rows.with_columns(_w=hour).partition_by(
            "policy_version", "_w", as_dict=True).items()):
        part = part.drop("_w").sort("request_id")
        name = "part-s" + hashlib.sha256("\n".join(part["request_id"]).encode()).hexdigest()[:20] + ".parquet"
        written.append(_write_file(partition_dir(out, version, label), name, part, schema))
    return written


class WriteRewardParts(beam.PTransform):
    """Streaming runs: each emitted frame written as it comes (`write_stream_parts`); no grouping, no windows.
    `outcomes`: the frames are outcome rows, written to the task-outcome table of `out`."""

    def __init__(self, out: Location, outcomes: bool = False):
        super().__init__()
        self.out = storage.normalize(outcome_table(out) if outcomes else out)
        self.schema = OUTCOME_SCHEMA if outcomes else ROW_SCHEMA

    def expand(self, rows):
        out, schema = self.out, self.schema
        return rows | "WriteParts" >> beam.FlatMap(lambda f: write_stream_parts(out, f, schema))


def write_dead_letters(path: Location, letters, cluster: str) -> int:
    """The cycle's dead letters as Parquet (the archive's dead-letter schema), replaced whole on a rerun."""
    table = dead_letter_table(sorted(letters, key=lambda d: (d.message.topic, d.message.partition,
                                                              d.message.offset)), cluster)
    storage.write_parquet(path, table, compression="zstd")
    return table.num_rows


def write_carry(directory: Location, batches) -> int:
    """The open join state, one `<event_type>.parquet` per type (first copy of an event wins)."""
    by_type: dict[str, list[pl.DataFrame]] = {}
    for b in batches:
        by_type.setdefault(b.event_type, []).append(b.frame)
    n = 0
    for t in sorted(by_type):
        f = pl.concat(by_type[t]).unique("event_id", keep="first").sort("event_time", "event_id")
        storage.write_parquet(storage.join(directory, f"{t}.parquet"), f.to_arrow())
        n += f.height
    return n
