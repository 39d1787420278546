"""Long loops in training (trainer/outcomes.py): a background task's requests are held back until their task's
outcome row comes out, then train once on reward + outcome_weight x r_outcome, fetched from earlier windows when
needed; chain rows get their own staleness bound."""

from datetime import datetime, timezone

import polars as pl
import pytest

from trainer.outcomes import with_outcomes
from trainer.selection import select_rows

T = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _rows(ids, tasks, rewards, versions=None):
    n = len(ids)
    return pl.DataFrame({"request_id": ids, "task_id": tasks, "reward": rewards,
                         "policy_version": versions or ["3"] * n, "prompt_token_ids": [[1, 2]] * n,
                         "completion_token_ids": [[3]] * n, "mature_time": [T] * n},
                        schema_overrides={"task_id": pl.String})


def _outcomes(ids, r, label="known"):
    return pl.DataFrame({"request_id": ids, "r_outcome": [r] * len(ids), "outcome_label": [label] * len(ids)},
                        schema={"request_id": pl.String, "r_outcome": pl.Float64, "outcome_label": pl.String})


def _never(missing):
    raise AssertionError(f"earlier windows were read though every chain row is in the window ({missing})")


def _lookup(table):
    """A read of earlier windows that returns `table` and checks it is asked for only the rows not in the window."""
    def read(missing):
        assert "a3" not in missing["request_id"].to_list()     # a3's reward row is in the window
        return table
    return read


def test_task_rows_wait_for_their_outcome_and_interactive_rows_train_now():
    window = _rows(["i1", "t1", "t2"], [None, "task", "task"], [0.5, 1.0, -1.0])
    rows, counts = with_outcomes(window, _outcomes([], 0.0), _never, 1.0)
    assert rows["request_id"].to_list() == ["i1"] and rows["chain"].to_list() == [False]
    assert counts["held_for_outcome"] == 2 and counts["chain_rows"] == 0


def test_the_outcome_reweights_every_chain_row_once_from_this_window_and_earlier_ones():
    earlier = _rows(["a1", "a2", "x"], ["A", "A", None], [0.2, -0.4, 0.0], versions=["1", "2", "2"])
    window = _rows(["i1", "a3", "b1"], [None, "A", "B"], [0.5, 1.0, -1.0])
    table = pl.concat([earlier, window])
    rows, counts = with_outcomes(window, _outcomes(["a1", "a2", "a3"], -1.25), _lookup(table), 0.5)
    got = dict(zip(rows["request_id"], rows["reward"]))
    assert got == pytest.approx({"i1": 0.5, "a1": 0.2 - 0.625, "a2": -0.4 - 0.625, "a3": 1.0 - 0.625})
    assert dict(zip(rows["request_id"], rows["chain"])) == {"i1": False, "a1": True, "a2": True, "a3": True}
    assert counts == {"outcome_rows": 3, "outcome_rows_known": 3, "chain_rows": 3, "held_for_outcome": 1,
                      "outcome_without_reward_row": 0}                      # b1 waits for task B's outcome
    _, missing = with_outcomes(window, _outcomes(["a3", "gone"], 1.0), _lookup(table), 1.0)
    assert missing["outcome_without_reward_row"] == 1


def test_an_unknown_outcome_trains_the_chain_on_its_own_rewards():
    window = _rows(["t1"], ["task"], [0.75])
    rows, counts = with_outcomes(window, _outcomes(["t1"], 0.0, "unknown"), _never, 1.0)
    assert rows["reward"].to_list() == [0.75] and counts["outcome_rows_known"] == 0


def test_chain_rows_may_be_older_than_other_rows():
    window = _rows(["i_old", "c_old", "c_older"], [None, "A", "A"], [1.0, 1.0, 1.0], versions=["1", "1", "0"])
    rows, _ = with_outcomes(window, _outcomes(["c_old", "c_older"], 1.0), _never, 1.0)
    sel = select_rows(rows, champion="3", ancestors=["2", "1", "0"], staleness=1, min_rows=1, chain_staleness=2)
    assert sel.rows["request_id"].to_list() == ["c_old"]                 # v1 is 2 back: a chain row only
    assert sel.counts["dropped_other_version"] == 2
