"""Reward table retention (pipelines/rewards/table_retention.py): a finished cycle's window goes once its cut lies
`rewards.retention_s` before the earliest cut a cycle still to train reads back from; never a window a cycle still
to train reads (its own, or one its chains reach back to), never the newest finished one, never an unfinished one,
and nothing while the loop stands still. The retention key is not part of the spec's version, and cannot be set
shorter than the chains' reach."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import polars as pl
import pytest
from pydantic import ValidationError

from pipelines.metrics.demo import demo_rows, write_demo_table
from pipelines.rewards.spec import RewardSpec
from pipelines.rewards.table_retention import (WindowInfo, delete_windows, expired_windows, hour_window, reads_from,
                                               table_windows)
from schemas.reward_table import read_reward_rows

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)
KEEP = RewardSpec().outcome_keep_s()           # how far back a cycle's chains reach: the least retention allowed


def cycles(n: int, unfinished: int = 0, step: timedelta = 5 * H) -> list[WindowInfo]:
    """c0..c{n-1}, five hours apart, cycle k cut at T0 + (k+1)·step; the last `unfinished` still in flight."""
    return [WindowInfo(f"c{k}", T0 + (k + 1) * step, T0 + k * step, k < n - unfinished) for k in range(n)]


def test_windows_whose_cut_lies_retention_before_the_earliest_read_go():
    ws = cycles(10, unfinished=1)                      # c9 in flight: it reads back from its after, c8's cut
    assert reads_from(ws) == T0 + 45 * H
    cutoff = T0 + 45 * H - timedelta(seconds=KEEP)
    assert expired_windows(ws, KEEP) == sorted(w.label for w in ws if w.as_of <= cutoff) == [f"c{k}" for k in range(7)]
    assert expired_windows(ws, 0) == []                                            # 0 keeps every window
    assert expired_windows(ws, 30 * 86400) == []                                   # all within 30 days


def test_the_earliest_read_is_an_unfinished_cycles_after_when_that_is_older():
    ws = cycles(10)
    stuck = WindowInfo("c4", ws[4].as_of, ws[4].after, False)   # failed, to be resumed: it trains on c4 and before
    ws[4] = stuck
    assert reads_from(ws) == stuck.after
    assert "c4" not in expired_windows(ws, KEEP) and expired_windows(ws, KEEP) == ["c0", "c1"]
    # an unfinished cycle whose after is unknown (the files source records none) reads back from the finished
    # cut before its own
    ws[4] = WindowInfo("c4", ws[4].as_of, None, False)
    assert reads_from(ws) == ws[3].as_of


def test_nothing_goes_while_no_cycle_finished_or_the_loop_stands_still():
    assert expired_windows(cycles(5, unfinished=5), KEEP) == []
    assert reads_from([]) is None
    ws = cycles(3)
    # ages are the cycles' cuts against each other, no wall clock: however long the loop stops, what goes is what
    # went when its last cycle ended
    assert expired_windows(ws, 86400) == [] and expired_windows(ws, KEEP) == ["c0"]
    unknown = [WindowInfo("by-hand", None, None, True), *ws]       # a window of unknown cut is never expired
    assert "by-hand" not in expired_windows(unknown, 1)


def test_never_a_window_a_cycle_still_to_train_reads():
    """Random cut sequences (cycles late, close together, an outage), any retention the spec allows, some cycles in
    flight: no expired window's cut lies within the chains' reach of any cycle still to train -- each in-flight
    cycle, and the next one, whose `after` is the newest finished cut -- and the newest finished window stays."""
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 30)
        t, ws = T0, []
        for k in range(n):
            gap = timedelta(seconds=rng.choice([0, 60, 3600, 5 * 3600, 3 * 86400]))
            ws.append(WindowInfo(f"c{k}", t + gap, t, True))
            t += gap
        for k in rng.sample(range(n), rng.randint(0, min(2, n))):
            w = ws[k]
            ws[k] = WindowInfo(w.label, w.as_of, w.after if rng.random() < 0.5 else None, False)
        retention = KEEP * rng.choice([1, 1.5, 10])
        gone = set(expired_windows(ws, retention))
        finished = [w for w in ws if w.finished]
        readers = [w.after or max([f.as_of for f in finished if f.as_of < w.as_of], default=T0)
                   for w in ws if not w.finished]
        if finished:
            newest = max(f.as_of for f in finished)
            readers.append(newest)                                  # the next cycle's after
            assert not [f for f in finished if f.as_of == newest and f.label in gone]
        for w in ws:
            if w.label in gone:
                assert w.finished
                assert all(w.as_of <= r - timedelta(seconds=KEEP) for r in readers)


def test_a_streaming_runs_hour_windows_age_by_their_hour():
    w = hour_window("20261101T050000Z")
    assert w == WindowInfo("20261101T050000Z", T0 + 6 * H, T0 + 5 * H, True)
    assert hour_window("c7") is None and hour_window("20261101T0500") is None


def test_deleting_windows_keeps_every_row_the_next_cycles_chains_reach(tmp_path):
    """On a table laid out as the reward job writes it: the expired windows go whole (every version's partition,
    the outcome table's too), empty version folders with them, and the lookup a cycle's training does for its
    chains (`read_reward_rows` over the chains' request times) still finds every row within its reach."""
    table = tmp_path / "table"
    rows = {}
    for k in range(10):
        rows[k] = demo_rows(60, cycle=k, full_schema=True).with_columns(
            request_time=T0 + k * 5 * H + pl.int_range(60, eager=False).cast(pl.Int64) * timedelta(minutes=4))
        write_demo_table(table, f"c{k}", rows[k])
        write_demo_table(table / "_outcomes", f"c{k}", rows[k].head(3))
    ws = cycles(10, unfinished=1)
    parts = table_windows(table)
    assert sorted(parts) == [f"c{k}" for k in range(10)] and all(len(parts[f"c{k}"]) >= 2 for k in range(10))
    gone = delete_windows(table, parts, expired_windows(ws, KEEP))
    assert gone == [f"c{k}" for k in range(7)]
    assert sorted(table_windows(table)) == ["c7", "c8", "c9"]
    assert not [d for d in table.glob("policy_version=*") if not any(d.iterdir())]          # no empty folders
    # cycle c9's chains: requests up to KEEP before its after (c8's cut); the next cycle's reach starts later
    since = ws[9].after - timedelta(seconds=KEEP)
    wanted = pl.concat(list(rows.values())).filter(pl.col("request_time") >= since)
    assert wanted.height and wanted["request_time"].min() < T0 + 40 * H           # reaches into c7
    found = read_reward_rows(table, wanted["request_id"], wanted["policy_version"], since, ws[9].as_of)
    assert sorted(found["request_id"]) == sorted(wanted["request_id"])


def test_retention_is_not_part_of_the_spec_version_and_must_cover_the_chains():
    assert RewardSpec(retention_s=0).version() == RewardSpec().version() == RewardSpec(retention_s=90 * 86400).version()
    assert RewardSpec(retention_s=KEEP).retention_s == KEEP
    with pytest.raises(ValidationError, match="shorter than"):
        RewardSpec(retention_s=KEEP - 1)
    with pytest.raises(ValidationError, match="shorter than"):
        RewardSpec(long_horizon_s=30 * 86400)             # the default 30 days no longer covers a 30-day horizon
