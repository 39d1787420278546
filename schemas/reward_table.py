"""The reward table, where the reward job meets the trainer and the data-quality suites: the Arrow schema of its
rows and reading it back (no Beam needed)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

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


def _read_table(path, window, model, schema, what: str) -> pl.DataFrame:
    p = storage.normalize(path)
    if not storage.exists(p):
        raise FileNotFoundError(f"{what} {p} does not exist")
    if storage.is_file(p):
        files = [p]
    else:
        files = [f.loc for f in storage.list_files(p, "**/*.parquet")
                 if not any(part.startswith(("_", ".")) for part in f.rel.split("/"))
                 and (window is None or f"window={window}" in f.rel.split("/"))]
    if not files:
        return pl.from_arrow(schema.empty_table())
    # pyarrow reads each file (its errors -- ArrowInvalid for a file that is not Parquet -- are what callers
    # handle); no hive partitioning, so directory names never become columns. A file written before a field was
    # added to RewardRow gets that field's default (the trainer reads cut_short of every row).
    return pl.concat([pl.from_arrow(fill_defaults(storage.read_parquet(f), model)) for f in files],
                     how="diagonal_relaxed").sort("request_id")
