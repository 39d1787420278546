"""The long loop's lookup of earlier windows (trainer/outcomes.py read_chain_rows over
schemas/reward_table.py read_reward_rows): a cycle's outcome rows find their requests' reward rows by reading only
the partitions of the versions that served them and the request times they name, and train the same chains as a
read of the whole table."""

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from schemas.reward_table import read_reward_rows, read_reward_table
from trainer.outcomes import read_chain_rows, with_outcomes

T = datetime(2026, 11, 1, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)


def _reward_rows(ids, version, hours, tasks=None):
    n = len(ids)
    return pl.DataFrame({"request_id": ids, "policy_version": [version] * n,
                         "request_time": [T + h * HOUR for h in hours], "task_id": tasks or [None] * n,
                         "reward": [0.1 * (i + 1) for i in range(n)], "prompt_token_ids": [[1, 2]] * n,
                         "completion_token_ids": [[3]] * n, "mature_time": [T + (h + 1) * HOUR for h in hours]},
                        schema_overrides={"task_id": pl.String, "request_time": pl.Datetime("us", "UTC"),
                                          "mature_time": pl.Datetime("us", "UTC")})


def _write(root, version, window, rows):
    d = root / f"policy_version={version}" / f"window={window}"
    d.mkdir(parents=True)
    rows.write_parquet(d / "part-0.parquet")


def _outcomes(rows, r_outcome):
    return rows.select("request_id", "policy_version", "request_time",
                       r_outcome=pl.lit(r_outcome), outcome_label=pl.lit("known"))


@pytest.fixture
def table(tmp_path):
    """Four cycles: an old one (v1, day one), then v2 serving task A's first requests, v3 serving the rest."""
    root = tmp_path / "table"
    _write(root, "1", "c1", _reward_rows(["old1", "old2"], "1", [0, 1]))
    _write(root, "2", "c2", _reward_rows(["a1", "i2"], "2", [30, 31], ["A", None]))
    _write(root, "2", "c3", _reward_rows(["a2", "b1"], "2", [33, 34], ["A", "B"]))
    _write(root, "3", "c4", _reward_rows(["a3", "i4"], "3", [36, 37], ["A", None]))
    return root


def test_the_bounded_lookup_trains_the_same_chains_as_reading_the_whole_table(table):
    window = read_reward_table(table, "c4")
    chain = read_reward_table(table).filter(pl.col("task_id") == "A")
    outcomes = _outcomes(chain, -0.5)
    bounded, counts = with_outcomes(window, outcomes, lambda missing: read_chain_rows(table, missing), 1.0)
    full, full_counts = with_outcomes(window, outcomes, lambda missing: read_reward_table(table), 1.0)
    assert bounded.equals(full) and counts == full_counts
    assert bounded.filter(pl.col("chain"))["request_id"].to_list() == ["a1", "a2", "a3"]
    assert counts["outcome_without_reward_row"] == 0


def test_the_lookup_reads_only_the_versions_and_times_the_outcome_rows_name(table):
    missing = _outcomes(read_reward_table(table).filter(pl.col("request_id").is_in(["a1", "a2"])), 1.0)
    (table / "policy_version=1" / "window=c1" / "part-0.parquet").write_bytes(b"not parquet")   # v1 is not opened
    assert read_chain_rows(table, missing)["request_id"].to_list() == ["a1", "a2"]
    with pytest.raises(Exception):
        read_reward_table(table)                                                    # the whole-table read opens it


def test_rows_outside_the_time_range_or_ids_are_ignored(table):
    ids = ["a1", "a2", "b1", "i2"]
    got = read_reward_rows(table, ids, ["2"], T + 31 * HOUR, T + 33 * HOUR)
    assert got["request_id"].to_list() == ["a2", "i2"]                 # a1 (30 h) and b1 (34 h) lie outside
    assert read_reward_rows(table, ["a3"], ["2"], T, T + 99 * HOUR).height == 0    # a3 is v3's, not v2's
    assert read_reward_rows(table, ["x"], ["9"], T, T + HOUR).height == 0          # no such version
    assert read_reward_rows(table, [], ["2"], T, T + 99 * HOUR).height == 0
