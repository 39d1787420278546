"""Data selection: champion rows kept, stale rows within the bound, the rest dropped and counted; refusals."""

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from trainer.selection import SelectionError, select_rows

T = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _rows(versions, reward=1.0, tokens=(1, 2), mature=T):
    return pl.DataFrame({
        "request_id": [f"r{i}" for i in range(len(versions))], "policy_version": versions,
        "reward": [reward] * len(versions), "prompt_token_ids": [list(tokens)] * len(versions),
        "completion_token_ids": [list(tokens)] * len(versions), "mature_time": [mature] * len(versions)})


def test_champion_rows_and_recent_ancestors_are_kept_the_rest_counted():
    s = select_rows(_rows(["3", "3", "2", "1", "9"]), champion="3", ancestors=["2", "1"], staleness=1, min_rows=1)
    assert s.rows["request_id"].to_list() == ["r0", "r1", "r2"] and s.rows["stale"].to_list() == [False, False, True]
    assert s.counts == {"rows_read": 5, "kept_on_policy": 2, "kept_stale": 1, "dropped_other_version": 2,
                        "dropped_no_reward": 0, "dropped_cut_short": 0, "dropped_over_max_rows": 0}
    wider = select_rows(_rows(["3", "2", "1"]), champion="3", ancestors=["2", "1"], staleness=2, min_rows=1)
    assert wider.counts["kept_stale"] == 2
    only = select_rows(_rows(["3", "2"]), champion="3", ancestors=["2"], staleness=0, min_rows=1)
    assert only.counts["kept_stale"] == 0 and only.counts["dropped_other_version"] == 1


def test_too_few_rows_privacy_stripped_and_immature_rows_refuse_the_run():
    with pytest.raises(SelectionError, match="minimum batch is 3"):
        select_rows(_rows(["3", "1"]), champion="3", ancestors=[], staleness=1, min_rows=3)
    with pytest.raises(SelectionError, match="no token ids"):
        select_rows(_rows(["3"], tokens=()), champion="3", ancestors=[], staleness=1, min_rows=1)
    with pytest.raises(SelectionError, match="mature after"):
        select_rows(_rows(["3"], mature=T + timedelta(hours=1)), champion="3", ancestors=[], staleness=1,
                    min_rows=1, as_of=T)


def test_max_rows_keeps_on_policy_rows_first_as_a_seeded_sample():
    rows = _rows(["3"] * 50 + ["2"] * 50)
    s = select_rows(rows, champion="3", ancestors=["2"], staleness=1, min_rows=1, max_rows=30, seed=1)
    assert s.rows.height == 30 and not s.rows["stale"].any() and s.counts["dropped_over_max_rows"] == 70
    assert s.rows["request_id"].to_list() == sorted(s.rows["request_id"].to_list())
    again = select_rows(rows, champion="3", ancestors=["2"], staleness=1, min_rows=1, max_rows=30, seed=1)
    other = select_rows(rows, champion="3", ancestors=["2"], staleness=1, min_rows=1, max_rows=30, seed=2)
    assert again.rows.equals(s.rows) and not other.rows.equals(s.rows)
    more = select_rows(rows, champion="3", ancestors=["2"], staleness=1, min_rows=1, max_rows=60)
    assert more.counts["dropped_over_max_rows"] == 40 and int(more.rows["stale"].sum()) == 10


def test_cut_short_rows_are_dropped_and_counted_unless_training_on_them_is_asked_for():
    rows = _rows(["3", "3", "2", "3", "9"]).with_columns(cut_short=pl.Series([False, True, True, False, True]))
    s = select_rows(rows, champion="3", ancestors=["2"], staleness=1, min_rows=1)
    assert s.rows["request_id"].to_list() == ["r0", "r3"] and not s.rows["cut_short"].any()
    assert (s.counts["dropped_cut_short"], s.counts["kept_stale"], s.counts["dropped_other_version"]) == (2, 0, 1)
    on = select_rows(rows, champion="3", ancestors=["2"], staleness=1, min_rows=1, train_on_cut_short=True)
    assert on.rows["request_id"].to_list() == ["r0", "r1", "r2", "r3"] and on.rows["cut_short"].to_list()[1:3] == [
        True, True]
    assert (on.counts["dropped_cut_short"], on.counts["kept_on_policy"], on.counts["kept_stale"]) == (0, 3, 1)
    with pytest.raises(SelectionError, match="1 cut short"):
        select_rows(rows.head(2), champion="3", ancestors=[], staleness=1, min_rows=2)


def test_a_cut_short_row_with_no_completion_token_is_dropped_not_refused_even_when_training_on_cut_short():
    rows = _rows(["3", "3"]).with_columns(request_id=pl.Series(["r0", "early"]), cut_short=pl.Series([False, True]),
                                          completion_token_ids=pl.Series([[1, 2], []], dtype=pl.List(pl.Int64)))
    for on in (False, True):
        s = select_rows(rows, champion="3", ancestors=[], staleness=1, min_rows=1, train_on_cut_short=on)
        assert s.rows["request_id"].to_list() == ["r0"] and s.counts["dropped_cut_short"] == 1
    with pytest.raises(SelectionError, match="no token ids"):     # not cut short: stripped content, as before
        select_rows(rows.with_columns(cut_short=pl.lit(False)), champion="3", ancestors=[], staleness=1, min_rows=1)


def test_a_table_without_the_v4_columns_reads_as_single_samples_that_ran_to_the_end():
    s = select_rows(_rows(["3", "3"]), champion="3", ancestors=[], staleness=1, min_rows=1)
    assert s.rows["cut_short"].to_list() == [False, False] and s.rows["group_id"].to_list() == [None, None]


def test_max_rows_draws_the_samples_of_one_request_together():
    rows = _rows(["3"] * 40).with_columns(group_id=pl.Series([f"g{i // 4}" for i in range(40)]))
    for seed in range(5):
        s = select_rows(rows, champion="3", ancestors=[], staleness=1, min_rows=1, max_rows=12, seed=seed)
        assert s.rows.height == 12 and s.rows.group_by("group_id").len()["len"].to_list() == [4, 4, 4]
