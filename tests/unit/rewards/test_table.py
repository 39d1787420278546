"""Reading the reward table back: all of it, or one window (a cycle's rows)."""

from __future__ import annotations

import polars as pl

from schemas.reward_table import read_reward_table


def _part(root, version: str, window: str, ids: list[str]) -> None:
    d = root / f"policy_version={version}" / f"window={window}"
    d.mkdir(parents=True)
    pl.DataFrame({"request_id": ids, "policy_version": [version] * len(ids)}).write_parquet(d / "part-0.parquet")


def test_a_window_reads_only_that_cycles_partitions_across_versions(tmp_path):
    _part(tmp_path, "1", "c1", ["b", "a"])
    _part(tmp_path, "2", "c1", ["c"])
    _part(tmp_path, "2", "c2", ["d"])
    _part(tmp_path, "2", "c10", ["e"])          # a window whose name starts like another is not mixed in
    assert read_reward_table(tmp_path, "c1")["request_id"].to_list() == ["a", "b", "c"]
    assert read_reward_table(tmp_path)["request_id"].to_list() == ["a", "b", "c", "d", "e"]
    assert read_reward_table(tmp_path, "c3").height == 0
