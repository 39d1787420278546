"""A replay of the long loop gives the live cycles' outcome rows, byte for byte, with the same counts.

The live side is the real cycle job (`run_cycle`: range fixing, the bounded Beam join, carry, manifests) over the
stand-in broker of test_cycle_time_bound, four cycles of about three hours of event time each; every record it
serves is also archived (the archiver over an in-memory log with the same topics, partition and offsets), and the
archive is replayed over the window the cycles' background tasks started in. Background tasks judged 1 h, 4 h
and 7.9 h after their last request, one never judged, one whose outcome arrived after the cut-off (late), a resent
outcome (late too) and a privacy-mode request: the replay's outcome rows equal the cycles' byte for byte, with
the same counts, whether lateness is judged by the recorded cycles or by the archived receipt times; replays of
sub-windows give the same rows for their requests (chains that began before the window, outcomes long after it).
"""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest

from pipelines.rewards import replay_job
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.bounded import prune
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.cycle_job import run_cycle
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.outcomes import assemble_outcomes
from pipelines.rewards.spec import RewardSpec
from schemas import to_wire, topic_for
from schemas.reward_table import outcome_table, read_outcome_table, read_reward_table
from tests.unit.archive.helpers import FakeLog, make_archiver
from tests.unit.rewards.builders import T0, at, task_outcome, trajectory
from tests.unit.rewards.test_cycle_time_bound import Rec, log  # noqa: F401  (log: the stand-in broker fixture)

pytestmark = pytest.mark.slow
H = 3600
SPEC = RewardSpec(long_horizon_s=8 * H, outcome_lateness_s=600)
WINDOW = (at(0), at(5 * H))                      # the replay's [start, end): every background task starts in it
OUTCOME_COUNTERS = ("outcome_rows", "outcome_unknown", "outcomes_pending", "late_outcomes")


def task(rid: str, t: float, task_id: str, **kw):
    return trajectory(rid, t, task_id=task_id, workspace_id=f"w{task_id}", **kw)


def outcome(task_id: str, t: float, kind: str, **kw):
    return task_outcome(task_id, t, kind, workspace_id=f"w{task_id}", **kw)


MERGED_A = outcome("A", 1.5 * H, "merged", rating=5)       # 1 h after A's last request


def cycles() -> list[list[tuple]]:
    """Four cycles' input: (event, received time or None for event time + 1 s). Interactive requests every 30 min
    move the watermark; background tasks:
      A  a1, a2, a3 (two sessions; ap is privacy-mode) -> merged, rating 5, 1 h after a3       known, chain 3
      B  b1, b2 (two sessions)                         -> reverted, rating 2, 4 h after b2     known, chain 2
      C  c1, c2, c3                                    -> accepted 7.9 h after c3: c3 known (chain 1); c1 and c2
                                                          are 9.9 h and 8.9 h before it: unknown
      D  d1                                            -> never judged: unknown
      E  e1                                            -> accepted at 5:00, received at 7:00, after cycle 2's
                                                          cut-off: late (dropped, counted), e1 unknown
    and A's outcome resent at 7:00: a late copy."""
    background = [task("a1", 600, "A", session_id="sa1"), task("a2", 1200, "A", session_id="sa1"),
                  task("ap", 1500, "A", session_id="sa1", privacy_mode=True),
                  task("a3", 1800, "A", session_id="sa2"), MERGED_A,
                  task("b1", H, "B", session_id="sb1"), task("b2", 2 * H, "B", session_id="sb2"),
                  outcome("B", 6 * H, "reverted", rating=2),
                  task("c1", 2 * H, "C"), task("c2", 3 * H, "C"), task("c3", 4 * H, "C"),
                  outcome("C", 4 * H + 7.9 * H, "accepted"),
                  task("d1", 3.5 * H, "D"), task("e1", 2.5 * H, "E")]
    interactive = [trajectory(f"i{n}", 1800 * n, workspace_id="wi", session_id="si") for n in range(26)]
    bounds = [0, 3 * H, 6 * H, 9 * H, 12.5 * H + 1]
    parts: list[list[tuple]] = [[] for _ in range(4)]
    for e in sorted(background + interactive, key=lambda e: e.event_time):
        s = (e.event_time - T0).total_seconds()
        parts[next(i for i in range(4) if bounds[i] <= s < bounds[i + 1])].append((e, None))
    parts[2] += [(outcome("E", 5 * H, "accepted"), at(7 * H)), (MERGED_A.model_copy(), at(7 * H))]
    return parts


def send(log, fake: FakeLog, part: list[tuple]) -> None:
    """Each event, stamped with its receipt time, to the stand-in broker the cycles read and to the log the
    archiver reads: same topic, partition and offset."""
    for e, received in part:
        e = e.model_copy(update={"received_time": received or e.event_time + timedelta(seconds=1)})
        topic, value = topic_for(e.event_type), to_wire(e)
        recs = log.parts.setdefault((topic, 0), [])
        recs.append(Rec(topic, 0, len(recs), value, e.user_id.encode(),
                        int(e.received_time.timestamp() * 1000)))
        fake.append(topic, value, e.user_id.encode(), partition=0)


def in_window(frame: pl.DataFrame, start, end) -> pl.DataFrame:
    return frame.filter((pl.col("request_time") >= start) & (pl.col("request_time") < end)).sort("request_id")


@pytest.fixture
def live(log, tmp_path):  # noqa: F811
    """Four live cycles over the stand-in broker; then the archive of everything they read."""
    fake = FakeLog(partitions=1)
    manifests = []
    for n, part in enumerate(cycles(), 1):
        send(log, fake, part)
        manifests.append(run_cycle(f"c{n}", "stand-in:0", tmp_path / "state", tmp_path / "rewards", SPEC, shards=2,
                                   idle_s=0.05, log=lambda *_: None))
    archiver, _ = make_archiver(tmp_path / "archive", fake, cluster_id="stand-in")
    archiver.run(until_idle_s=1.0)
    return tmp_path, manifests


def _replay(root, out, start, end, cycles=None):
    summary = replay_job.run(root / "archive", start, end, root / out, SPEC, shards=2, cycles=cycles)
    return summary, read_outcome_table(outcome_table(root / out)).sort("request_id")


def test_a_replay_gives_the_live_cycles_outcome_rows_and_counts(live):
    root, manifests = live
    assert [m.status for m in manifests] == ["done"] * 4
    live_outcomes = read_outcome_table(outcome_table(root / "rewards")).sort("request_id")
    # the scenario holds what it says
    got = {r["request_id"]: (r["outcome_label"], r["outcome"], r["chain_requests"] if r["outcome"] else 0)
           for r in live_outcomes.to_dicts()}
    assert got == {"a1": ("known", "merged", 3), "a2": ("known", "merged", 3), "a3": ("known", "merged", 3),
                   "b1": ("known", "reverted", 2), "b2": ("known", "reverted", 2), "c3": ("known", "accepted", 1),
                   "c1": ("unknown", "", 0), "c2": ("unknown", "", 0), "d1": ("unknown", "", 0),
                   "e1": ("unknown", "", 0)}
    c3 = live_outcomes.filter(pl.col("request_id") == "c3").row(0, named=True)
    assert c3["outcome_time"] - c3["request_time"] == timedelta(hours=7.9)
    # cycle by cycle: A's rows in the first, B's in the third, C's judged request and the unknowns in the last
    emitted = [m.counters.get("outcome_rows", 0) for m in manifests]
    assert emitted == [3, 0, 2, 5], [m.counters for m in manifests]
    live_counts = {k: sum(m.counters.get(k, 0) for m in manifests) for k in OUTCOME_COUNTERS}
    live_counts["outcomes_pending"] = manifests[-1].counters.get("outcomes_pending", 0)
    assert live_counts == {"outcome_rows": 10, "outcome_unknown": 4, "outcomes_pending": 0, "late_outcomes": 2}
    live_rows = in_window(read_reward_table(root / "rewards"), *WINDOW)

    for lateness in (root / "state", None):     # judged by the recorded cycles, then by the receipt times
        summary, replayed = _replay(root, "replay" if lateness else "replay-receipts", *WINDOW, cycles=lateness)
        assert replayed.equals(live_outcomes), lateness            # byte for byte, every column
        assert {k: summary.counters[k] for k in OUTCOME_COUNTERS} == live_counts, (lateness, summary.counters)
        assert summary.outcome_rows == live_outcomes.height
        assert summary.counters["late_outcomes"] <= summary.counters["late_events"]
        # and the reward rows of the window's requests, as before
        assert read_reward_table(root / ("replay" if lateness else "replay-receipts")).sort("request_id").equals(
            live_rows)


def test_replays_of_sub_windows_give_the_live_rows_of_their_requests(live):
    """[1:30, 5:00): b2's chain began before the window (b1 at 1:00); [0:00, 2:30): B's outcome (6:00) and C's
    unknowns (10:10) mature long after the window ends."""
    root, _ = live
    live_outcomes = read_outcome_table(outcome_table(root / "rewards"))
    for n, (start, end) in enumerate([(at(1.5 * H), at(5 * H)), (at(0), at(2.5 * H))]):
        summary, replayed = _replay(root, f"sub{n}", start, end, cycles=root / "state")
        expected = in_window(live_outcomes, start, end)
        assert replayed.equals(expected) and expected.height >= 4, (start, end)
        assert summary.counters["outcome_rows"] == expected.height and summary.counters["outcomes_pending"] == 0


def test_rtrl_replay_and_rtrl_rewards_print_the_outcome_counters(live, capsys):
    from infra.cli import main
    from infra.commands.rewards import summarize

    root, manifests = live
    rc = main(["--set", f'state_dir="{root}"', "replay", "--events", str(root / "archive"), "--start",
               WINDOW[0].isoformat(), "--end", WINDOW[1].isoformat(), "--out", str(root / "cli"), "--cycles",
               str(root / "state"), "--shards", "2"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)["replay"]
    assert {k: out[k] for k in OUTCOME_COUNTERS} == {"outcome_rows": 10, "outcome_unknown": 4,
                                                     "outcomes_pending": 0, "late_outcomes": 2}
    assert sum(p["rows"] for p in out["outcome_partitions"]) == 10
    # `rtrl rewards` prints summarize(the cycle's counters): the long loop's counters are there
    assert {k: summarize(manifests[-1].counters)[k] for k in OUTCOME_COUNTERS} == {
        "outcome_rows": 5, "outcome_unknown": 4, "outcomes_pending": 0, "late_outcomes": 0}
    assert summarize(manifests[2].counters)["late_outcomes"] == 2


def test_a_chain_request_stays_in_the_join_until_every_row_that_counts_it_is_out():
    """r2's outcome comes a minute after it, so its row waits for its own reward row (45 min); r1, 7.9 h before the
    outcome, has matured before that. A firing between the two must not prune r1, or r2's row would count a chain
    of 1 where r1's counted 2 (and a replay, firing once, counts 2)."""
    events = [task("r1", 0, "F"), task("r2", 7.9 * H, "F"), outcome("F", 7.9 * H + 60, "merged")]
    frames = frames_from_events(events)
    between = at(7.9 * H + 60 + 600 + 600)              # after r1's row (outcome + 10 min), before r2's
    once, _ = assemble_outcomes(frames, SPEC, at(10 * H))
    first, _ = assemble_outcomes(frames, SPEC, between)
    then, _ = assemble_outcomes(prune(frames, between, SPEC), SPEC, at(10 * H), between)
    assert first["request_id"].to_list() == ["r1"] and then["request_id"].to_list() == ["r2"]
    assert pl.concat([first, then]).sort("request_id").equals(once)
    assert once["chain_requests"].to_list() == [2, 2]
    # the reward rows are unaffected by the longer keep
    classifier = get_classifier(SPEC.classifier)
    assert assemble_rewards(frames, SPEC, classifier, at(10 * H)).rows.height == 2
