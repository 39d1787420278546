"""Cycle runs of the reward job against the real broker: a run SIGKILLed mid-way and rerun, then the next cycle;
every request is emitted exactly once across cycles, and the rows equal one computation over all events."""

from __future__ import annotations

import json
import random
import signal
import subprocess
from datetime import datetime
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from infra.argv import rtrl_argv
from infra.stack.stack import Stack
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.kafka_range import cluster_id
from schemas.reward_table import read_reward_table
from pipelines.rewards.spec import RewardSpec
from schemas import to_wire, topic_for
from tests.conftest import make_config
from tests.unit.rewards.builders import applied, followup, rejected, snapshot, tool_result, trajectory
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).parents[2]


def part(first: int, last: int, extra=()):
    ev = list(extra)
    for i in range(first, last):
        t, u = 600 * i, f"u{i % 4}"
        ev += [trajectory(f"r{i}", t, user_id=u, session_id=f"s{i % 4}", workspace_id=f"ws{i % 4}",
                          kind="question" if i % 5 == 4 else "edit", calls=("ok", "parse_error")[: 1 + (i % 3 == 0)]),
               followup(f"r{i}", t + 40, "that is wrong" if i % 2 else "thanks", user_id=u, session_id=f"s{i % 4}",
                        workspace_id=f"ws{i % 4}")]
        if i % 3:
            ev += [applied(f"r{i}", t + 20, "abcd", user_id=u, workspace_id=f"ws{i % 4}", session_id=f"s{i % 4}"),
                   snapshot(t + 900, "abc", user_id=u, workspace_id=f"ws{i % 4}", session_id=f"s{i % 4}")]
        else:
            ev += [rejected(f"r{i}", t + 15, user_id=u, workspace_id=f"ws{i % 4}", session_id=f"s{i % 4}"),
                   tool_result(f"r{i}", t + 16, "tool_error", user_id=u, workspace_id=f"ws{i % 4}",
                               session_id=f"s{i % 4}")]
    return ev


def produce(bootstrap: str, events, raw: tuple[tuple[str, bytes], ...] = ()) -> list:
    """Produce `events`, then the `raw` (topic, value) messages; the raw messages' RecordMetadata (partition,
    offset)."""
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for e in events:
        p.send(topic_for(e.event_type), key=e.user_id.encode(), value=to_wire(e))
    raw_sent = [p.send(topic, value=value) for topic, value in raw]
    p.flush()
    p.close()
    return [f.get(timeout=30) for f in raw_sent]


def cli(cfg, *args) -> list[str]:
    sets = [f'state_dir="{cfg.state_dir}"', f"kafka.port={cfg.kafka.port}"]
    return rtrl_argv(*args, overrides=sets)


@pytest.fixture
def broker(tmp_path):
    st = Stack(make_config(tmp_path / "state"))
    st.up(log=lambda *_: None)
    yield st
    st.down(log=lambda *_: None)


def test_cycle_killed_mid_way_and_rerun_then_next_cycle_emits_each_request_exactly_once(broker):
    cfg = broker.cfg
    a = part(0, 12)
    b = part(12, 24, extra=[snapshot(600 * 11 + 1000, "abcd", user_id="u3", workspace_id="ws3", session_id="s3")])
    [broken] = produce(cfg.kafka.bootstrap(), a, raw=((topic_for("followup_message"), b'{"event_type": "followup'),))
    manifest = cfg.state_path / "rewards" / "cycles" / "c1.json"
    proc = subprocess.Popen(cli(cfg, "rewards", "--cycle", "c1", "--idle", "1", "--shards", "3"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: manifest.exists() or proc.poll() is not None, 120, "the cycle's manifest", interval_s=0.02)
    proc.send_signal(signal.SIGKILL)          # mid-way: the range is fixed, the Beam job has not finished
    proc.wait()
    assert json.loads(manifest.read_text())["status"] == "started"

    def run(cycle: str) -> dict:
        out = subprocess.run(cli(cfg, "rewards", "--cycle", cycle, "--idle", "1", "--shards", "3"), cwd=REPO,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)["rewards"]

    c1 = run("c1")
    dead = pq.read_table(cfg.state_path / "rewards" / "dead_letter" / "c1.parquet").to_pylist()
    assert [(d["reason"], d["topic"], d["value"]) for d in dead] == [
        ("invalid_json", topic_for("followup_message"), b'{"event_type": "followup')]
    assert (dead[0]["partition"], dead[0]["offset"]) == (broken.partition, broken.offset)
    assert dead[0]["cluster_id"] == cluster_id(cfg.kafka.bootstrap()) != ""
    assert c1["dead_letters"] == {"invalid_json": 1}
    assert run("c1")["rows"] == c1["rows"]    # a done cycle is not run twice
    produce(cfg.kafka.bootstrap(), b)
    c2 = run("c2")
    assert c2["after"] == c1["as_of"] and c1["rows"] > 0 and c2["rows"] > 0

    table = read_reward_table(cfg.state_path / "rewards" / "table")
    assert table["request_id"].n_unique() == table.height == c1["rows"] + c2["rows"]
    spec = RewardSpec()
    expected = assemble_rewards(frames_from_events(a + b), spec, get_classifier(spec.classifier),
                                datetime.fromisoformat(c2["as_of"])).rows
    assert table.sort("request_id").to_dicts() == expected.to_dicts()


def test_a_replay_of_live_cycles_that_saw_late_duplicate_and_out_of_order_events_reproduces_their_rows(broker,
                                                                                                       tmp_path):
    from infra.config import load_config
    from pipelines.archive.archiver import Archiver
    from pipelines.rewards import replay_job
    from pipelines.rewards.cycle_job import run_cycle

    cfg, spec = broker.cfg, RewardSpec()
    boot, state, table = cfg.kafka.bootstrap(), cfg.state_path / "rewards", cfg.state_path / "rewards" / "table"

    def cycle(cycle_id: str):
        return run_cycle(cycle_id, boot, state, table, spec, shards=3, idle_s=1.0, log=lambda *_: None)

    a = part(0, 12)
    produce(boot, a)
    m1 = cycle("c1")
    cut = datetime.fromisoformat(m1.as_of)
    # cycle 2: new traffic in shuffled order, client retries of cycle-1 events (after its cut-off: duplicates; before
    # it: late), and new events for requests cycle 1 already emitted (late)
    b = part(12, 24)
    random.Random(7).shuffle(b)
    on_time = [e for e in a if e.event_time >= cut]
    assert on_time, "cycle 1 must hold events after its own cut-off"
    retries = on_time[:3] + a[:3]
    stragglers = [followup("r2", 600 * 2 + 50, "that is wrong", user_id="u2", session_id="s2", workspace_id="ws2"),
                  trajectory("r-late", 30, user_id="u1", session_id="s9", workspace_id="ws1")]
    produce(boot, b + retries + stragglers)
    m2 = cycle("c2")
    produce(boot, part(24, 30))
    m3 = cycle("c3")
    live = read_reward_table(table).sort("request_id")
    count = lambda name: sum(m.counters.get(name, 0) for m in (m1, m2, m3))  # noqa: E731
    assert count("late_requests") == 1 + sum(e.event_type == "trajectory" and e.event_time < cut for e in retries)
    assert count("late_events") >= 1 and count("duplicates_dropped") >= 1

    archive = tmp_path / "archive"
    acfg = load_config(None, [f'state_dir="{cfg.state_dir}"', f"kafka.port={cfg.kafka.port}",
                              f'archive.output_dir="{archive}"'])
    Archiver.from_config(acfg, log=lambda _: None).run(until_idle_s=2.0)
    times = [e.event_time for e in a + b + stragglers]
    start, end = min(times), max(times) + (max(times) - min(times))
    summary = replay_job.run(archive, start, end, tmp_path / "replay", spec, shards=3, cycles=state)
    replayed = read_reward_table(tmp_path / "replay").sort("request_id")
    assert replayed.filter(pl.col("request_id").is_in(live["request_id"].implode())).equals(live)
    assert replayed.height - live.height == m3.counters.get("requests_pending", 0)
    for name in ("events_read", "late_requests", "late_events", "duplicates_dropped"):
        assert summary.counters.get(name, 0) == count(name), (name, summary.counters, [m.counters for m in (m1, m2, m3)])
    assert summary.counters["late_rule_receipt"] == 0 and summary.counters["late_rule_live_cycle"] > 0


def test_cycles_and_a_replay_with_all_state_on_s3_give_the_rows_of_local_storage_and_leave_nothing_local(
        broker, s3_server, tmp_path):
    """The same cycles twice over one Kafka log: state and table on local disk, and on S3 through `rtrl rewards`
    processes whose state dir, working dir and temp dir start empty and stay empty. Then the archive on S3 replayed
    on Beam's DaskRunner (2 worker processes) into S3: the local replay's rows."""
    import os

    from dask.distributed import LocalCluster

    from infra.config import load_config
    from pipelines.archive.archiver import Archiver
    from pipelines.rewards import replay_job
    from pipelines.rewards.cycle_job import run_cycle

    cfg, spec = broker.cfg, RewardSpec()
    boot, local = cfg.kafka.bootstrap(), tmp_path / "local"
    remote = s3_server.url("rewards")
    bare = {d: tmp_path / "bare" / d for d in ("state", "cwd", "tmp")}
    for d in bare.values():
        d.mkdir(parents=True)

    def s3_cycle(cycle_id: str) -> dict:
        argv = rtrl_argv("rewards", "--cycle", cycle_id, "--idle", "1", "--shards", "3",
                         overrides=[f'state_dir="{bare["state"]}"', f"kafka.port={cfg.kafka.port}",
                                    f'rewards_dir="{remote}"'])
        out = subprocess.run(argv, cwd=bare["cwd"], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "TMPDIR": str(bare["tmp"]), "PYTHONPATH": str(REPO)})
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)["rewards"]

    produce(boot, part(0, 12))
    local_1 = run_cycle("c1", boot, local, local / "table", spec, shards=3, idle_s=1.0, log=lambda *_: None)
    s3_1 = s3_cycle("c1")
    produce(boot, part(12, 24))
    local_2 = run_cycle("c2", boot, local, local / "table", spec, shards=3, idle_s=1.0, log=lambda *_: None)
    s3_2 = s3_cycle("c2")
    assert s3_2["after"] == s3_1["as_of"] and (s3_1["rows"], s3_2["rows"]) == (
        sum(n for _, n in local_1.partitions), sum(n for _, n in local_2.partitions))
    assert read_reward_table(f"{remote}/table").equals(read_reward_table(local / "table"))
    from pipelines.metrics.cycle import scan_cycle   # the A/B metrics read the cycle's rows from S3 too

    assert scan_cycle(f"{remote}/table", "c2").collect().sort("request_id").equals(
        scan_cycle(local / "table", "c2").collect().sort("request_id"))
    assert any(k.endswith("/carry/c2/trajectory.parquet") for k in s3_server.keys(remote))
    # no local file at all, not even a log (Beam leaves only empty scratch folders in $TMPDIR)
    assert [p for d in bare.values() for p in d.rglob("*") if not p.is_dir()] == []

    # the archive on S3, replayed on a distributed engine whose workers share no memory and no disk
    archive = s3_server.url("archive")
    acfg = load_config(None, [f'state_dir="{cfg.state_dir}"', f"kafka.port={cfg.kafka.port}",
                              f'archive.output_dir="{archive}"'])
    Archiver.from_config(acfg, log=lambda _: None).run(until_idle_s=2.0)
    start, end = datetime.fromisoformat("2026-11-01T00:00:00+00:00"), datetime.fromisoformat("2026-11-03T00:00+00:00")
    direct = replay_job.run(archive, start, end, tmp_path / "replay", spec, shards=3, cycles=local)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask = replay_job.run(archive, start, end, f"{remote}/replay", spec, shards=3, cycles=remote,
                              beam_args=["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
                                         f"--dask_client_address={cluster.scheduler_address}"])
    assert direct.rows > 0 and read_reward_table(f"{remote}/replay").equals(read_reward_table(tmp_path / "replay"))
    assert dask.counters == direct.counters
