"""The reward table, where the reward job meets the trainer and the data-quality suites: the Arrow schema of its
rows and reading it back (no Beam needed)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from schemas import storage
from schemas.arrow import fill_defaults, model_arrow_schema
from schemas.outcomes import OutcomeRow
from schemas.rewards import RewardRow

ROW_SCHEMA = model_arrow_schema(RewardRow)
OUTCOME_SCHEMA = model_arrow_schema(OutcomeRow)
OUTCOMES_DIR = "_outcomes"   # under the reward table, whose readers skip names starting with '_'


def outcome_table(rewards: str | Path) -> Path | str:
    """The task-outcome table that goes with the reward table `rewards` (schemas.outcomes): `<rewards>/_outcomes`,
    laid out as the reward table is (partitions by policy_version and window)."""
    return storage.join(rewards, OUTCOMES_DIR)


def read_outcome_table(path: str | Path, window: str | None = None, missing_ok: bool = True) -> pl.DataFrame:
    """The task-outcome table (`schemas.outcomes`), laid out and read as the reward table is; empty when it does
    not exist and `missing_ok` (a job that never saw a background task writes none)."""
    if missing_ok and not storage.exists(storage.normalize(path)):
        return pl.from_arrow(OUTCOME_SCHEMA.empty_table())
    return _read_table(path, window, OutcomeRow, OUTCOME_SCHEMA, "task-outcome table")


def read_reward_table(path: str | Path, window: str | None = None) -> pl.DataFrame:
    """A reward table: one Parquet file, or every Parquet file under a directory (this sink's partition layout
    included; names starting with '_' or '.' are skipped), sorted by request_id. Partition directories are not
    turned into columns: `policy_version` is already a column of every row. `window`: only the partitions of
    that window (`.../window=<window>/...`: one cycle's rows, the cycle id being the window)."""
    return _read_table(path, window, RewardRow, ROW_SCHEMA, "reward table")


def read_reward_rows(path: str | Path, request_ids: Iterable[str], versions: Iterable[str], since: datetime,
                     until: datetime) -> pl.DataFrame:
    """The reward rows of `request_ids` served by `versions` with request_time in [since, until], sorted by
    request_id, read without the rest of the table: only the partitions `policy_version=<v>` of `versions` are
    listed, and of each of their files only the row groups whose request_time statistics meet [since, until] are
    read (a file of a window outside it costs its footer). The long loop's lookup of a chain's reward rows: an
    outcome row names its request's id, version and request time, and the reward row has the same three."""
    p = storage.normalize(path)
    if not storage.exists(p):
        raise FileNotFoundError(f"reward table {p} does not exist")
    if storage.is_file(p):
        files = [p]
    else:
        roots = [storage.join(p, f"policy_version={v}") for v in sorted(set(versions))]
        files = [f for r in roots if storage.exists(r) for f in _table_files(r, None)]
    ids = pa.array(sorted(set(request_ids)), pa.string())
    if not files or not len(ids):
        return pl.from_arrow(ROW_SCHEMA.empty_table())
    t, ts = ds.field("request_time"), ROW_SCHEMA.field("request_time").type
    where = (t >= pa.scalar(since, ts)) & (t <= pa.scalar(until, ts)) & ds.field("request_id").isin(ids)
    return pl.concat([pl.from_arrow(fill_defaults(_scan(f, where), RewardRow)) for f in files],
                     how="diagonal_relaxed").sort("request_id")


def _scan(loc, where: ds.Expression) -> pa.Table:
    fs, path = storage.resolve(loc)
    return ds.dataset(path, format="parquet", filesystem=fs).to_table(filter=where)


def _table_files(p, window: str | None) -> list:
    """The Parquet files under the table (or partition) folder `p`, skipping names that start with '_' or '.'."""
    return [f.loc for f in storage.list_files(p, "**/*.parquet")
            if not any(part.startswith(("_", ".")) for part in f.rel.split("/"))
            and (window is None or f"window={window}" in f.rel.split("/"))]


def _read_table(path, window, model, schema, what: str) -> pl.DataFrame:
    p = storage.normalize(path)
    if not storage.exists(p):
        raise FileNotFoundError(f"{what} {p} does not exist")
    files = [p] if storage.is_file(p) else _table_files(p, window)
    if not files:
        return pl.from_arrow(schema.empty_table())
    # pyarrow reads each file (its errors -- ArrowInvalid for a file that is not Parquet -- are what callers
    # handle); no hive partitioning, so directory names never become columns. A file written before a field was
    # added to RewardRow gets that field's default (the trainer reads cut_short of every row).
    return pl.concat([pl.from_arrow(fill_defaults(storage.read_parquet(f), model)) for f in files],
                     how="diagonal_relaxed").sort("request_id")
