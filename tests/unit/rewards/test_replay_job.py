"""The replay job over a real Parquet event log (written by the archiver): deterministic, idempotent, and equal to
the streaming computation of the same events."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipelines.rewards import replay_job
from schemas.reward_table import read_reward_table
from pipelines.rewards.spec import RewardSpec
from tests.unit.archive.helpers import FakeLog, archive_all
from tests.unit.rewards.builders import T0, applied, at, followup, rejected, snapshot, tool_result, trajectory
from tests.unit.rewards.test_compute_stream import run_stream

pytestmark = pytest.mark.slow
SPEC = RewardSpec()


def workload():
    ev = []
    for i in range(12):
        s, t = f"s{i % 3}", 400 * i
        ev += [trajectory(f"r{i}", t, session_id=s, workspace_id=f"ws{i % 5}", tokens=i * 40,
                          calls=("ok", "parse_error") if i % 4 == 0 else ("ok",)),
               followup(f"r{i}", t + 30, "that's wrong" if i % 3 == 0 else "thanks", session_id=s,
                        workspace_id=f"ws{i % 5}")]
        if i % 2:
            ev += [applied(f"r{i}", t + 10, "abcd", workspace_id=f"ws{i % 5}", session_id=s),
                   snapshot(t + 500, "abx", workspace_id=f"ws{i % 5}", session_id=s)]
        else:
            ev += [rejected(f"r{i}", t + 5, workspace_id=f"ws{i % 5}", session_id=s),
                   tool_result(f"r{i}", t + 7, "validation_error", workspace_id=f"ws{i % 5}", session_id=s)]
    ev += [trajectory("q", 100, kind="question", session_id="sq"), trajectory("after-q", 200, session_id="sq"),
           applied("after-q", 210, "ab", session_id="sq"), snapshot(300, "ab", session_id="sq")]
    return ev


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    log = FakeLog()
    events = workload()
    log.produce(events + events[:7])  # client retries: duplicates in the log
    archive_all(root, log)
    return root, events


def _replay(root, out, start=at(-60), end=at(10_000)):
    return replay_job.run(root, start, end, out, SPEC, shards=4)


def test_replay_twice_gives_byte_identical_tables(archive, tmp_path):
    root, events = archive
    a, b = _replay(root, tmp_path / "a"), _replay(root, tmp_path / "b")
    assert a.rows == b.rows == sum(1 for e in events if e.event_type == "trajectory")
    assert [open(p, "rb").read() for p, _ in a.partitions] == [open(p, "rb").read() for p, _ in b.partitions]


def test_rerun_into_the_same_output_replaces_the_partition_without_duplicates(archive, tmp_path):
    root, _ = archive
    first = _replay(root, tmp_path / "out")
    second = _replay(root, tmp_path / "out")
    table = read_reward_table(tmp_path / "out")
    assert table.height == first.rows == second.rows and table["request_id"].n_unique() == table.height


def test_replay_equals_the_streaming_computation_of_the_same_events(archive, tmp_path):
    root, events = archive
    _replay(root, tmp_path / "out")
    replayed = {r["request_id"]: r for r in read_reward_table(tmp_path / "out").to_dicts()}
    streamed, _ = run_stream([("events", [(e, (e.event_time - T0).total_seconds()) for e in events])])
    assert replayed == streamed
    assert replayed["q"]["deferred_to_request_id"] == "after-q"


def test_replay_keeps_only_requests_made_in_the_range(archive, tmp_path):
    root, _ = archive
    s = _replay(root, tmp_path / "out", start=at(0), end=at(1200))      # r0 at 0 s ... r2 at 800 s, q, after-q
    got = set(read_reward_table(tmp_path / "out")["request_id"])
    assert got == {"r0", "r1", "r2", "q", "after-q"} and s.rows == 5
    # the 7 client retries: the archiver kept one copy and recorded the others, which the replay counts
    assert s.counters["rows_emitted"] >= 5 and s.counters["duplicates_dropped"] == 7


def test_replay_rejects_a_naive_or_empty_range(archive, tmp_path):
    root, _ = archive
    with pytest.raises(ValueError, match="timezone"):
        replay_job.run(root, at(0).replace(tzinfo=None), at(10), tmp_path, SPEC)
    with pytest.raises(ValueError, match="must be after"):
        replay_job.run(root, at(10), at(10), tmp_path, SPEC)


def test_rtrl_replay_command_writes_the_table_and_prints_a_summary(archive, tmp_path, capsys):
    from infra.cli import main

    root, _ = archive
    rc = main(["--set", f'state_dir="{tmp_path}"', "replay", "--events", str(root), "--start", "2026-11-01T11:59Z",
               "--end", "2026-11-01T15:00Z", "--out", str(tmp_path / "out"), "--shards", "2"])
    assert rc == 0
    import json
    captured = capsys.readouterr()
    summary = json.loads(captured.out)["replay"]
    assert summary["rows"] == read_reward_table(tmp_path / "out").height == 14
    assert summary["events_read"] > 0 and summary["partitions"][0]["file"].endswith("part-0.parquet")
    assert summary["dead_letters"] == {} and summary["duplicates_dropped"] == 7   # the client retries
    assert {"requests_pending", "unknown_labels", "late_requests", "late_events"} <= set(summary)
    assert f"events {summary['events_read']:,}" in captured.err


def test_rtrl_replay_rejects_a_time_without_zone(tmp_path):
    from infra.cli import main

    with pytest.raises(SystemExit, match="needs a time zone"):
        main(["replay", "--start", "2026-11-01T00:00", "--end", "2026-11-02T00:00Z", "--out", str(tmp_path)])


def test_quality_suite_reads_the_partitioned_table_the_job_writes_and_passes(archive, tmp_path):
    from pipelines.quality import check_rewards

    root, _ = archive
    _replay(root, tmp_path / "out")
    result = check_rewards(tmp_path / "out", SPEC)
    assert result.success, result.failed_rules
    assert result.row_count == read_reward_table(tmp_path / "out").height


def test_without_live_cycles_an_event_received_past_its_cut_off_is_late_by_its_receipt_time(tmp_path):
    """A hand-made log: r1's dissatisfied follow-up reached the collector 4 hours after its event time, while later
    traffic kept arriving. The watermark had long passed it: the replay drops and counts it, as live cycles did."""
    from schemas import to_wire
    from pipelines.archive.wire_import import import_wire

    def received(e, delay_s: float = 1.0):
        return e.model_copy(update={"received_time": e.event_time + timedelta(seconds=delay_s)})

    on_time = [received(e) for e in [trajectory("r1", 0), applied("r1", 10, "ab"), snapshot(500, "ab")]]
    on_time += [received(trajectory(f"later{i}", 600 * i, session_id=f"s{i}")) for i in range(1, 30)]
    straggler = received(followup("r1", 30, "that is wrong"), delay_s=4 * 3600)
    wire = tmp_path / "events.jsonl"
    wire.write_text("".join(to_wire(e).decode() + "\n" for e in on_time + [straggler]))
    import_wire(wire, tmp_path / "archive")
    summary = replay_job.run(tmp_path / "archive", at(-60), at(600), tmp_path / "out", SPEC, shards=2)
    rows = read_reward_table(tmp_path / "out").to_dicts()
    assert [r["request_id"] for r in rows] == ["r1"]
    assert summary.counters["late_events"] == 1 and summary.counters["late_rule_receipt"] == summary.counters["events_read"]
    assert rows[0]["r_followup"] == 0  # the late "that is wrong" is not r1's outcome
    # the same log with the follow-up on time: it is used
    wire.write_text("".join(to_wire(e).decode() + "\n" for e in on_time + [received(straggler)]))
    import_wire(wire, tmp_path / "archive2")
    replay_job.run(tmp_path / "archive2", at(-60), at(600), tmp_path / "out2", SPEC, shards=2)
    assert read_reward_table(tmp_path / "out2").to_dicts()[0]["r_followup"] < 0
