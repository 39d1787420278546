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


def test_a_table_written_before_group_id_and_cut_short_reads_with_their_defaults(tmp_path):
    from pipelines.rewards.assemble import assemble_rewards
    from pipelines.rewards.frames import frames_from_events
    from pipelines.rewards.spec import RewardSpec
    from schemas.reward_table import ROW_SCHEMA
    from tests.unit.rewards.builders import WordClassifier, trajectory

    new = assemble_rewards(frames_from_events([trajectory("new", tokens=2, group_id="g", cut_short=True)]),
                           RewardSpec(), WordClassifier(), None).rows
    old = assemble_rewards(frames_from_events([trajectory("old", tokens=2)]), RewardSpec(), WordClassifier(),
                           None).rows.drop("group_id", "cut_short")
    _write(tmp_path, "1", "c1", old)
    alone = read_reward_table(tmp_path)
    assert alone["group_id"].to_list() == [None] and alone["cut_short"].to_list() == [False]
    assert set(alone.columns) == set(ROW_SCHEMA.names)
    _write(tmp_path, "1", "c2", new)
    both = read_reward_table(tmp_path)
    assert both.select("request_id", "group_id", "cut_short").rows() == [("new", "g", True), ("old", None, False)]


def _write(root, version: str, window: str, rows: pl.DataFrame) -> None:
    d = root / f"policy_version={version}" / f"window={window}"
    d.mkdir(parents=True)
    rows.write_parquet(d / "part-0.parquet")
