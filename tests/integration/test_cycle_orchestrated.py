"""The cycle with real components: broker, archiver, vLLM serving with two arms, simulated users, the Beam reward
job, the data-quality suite, DeepSpeed training, the gate (vLLM + sandbox), the registry and serving's hot swap.

- a cycle with a failure injected after each step in turn resumes and completes with exactly-once data;
- a candidate that fails the gate leaves the champion and serving unchanged;
- the Dagster replay job over the cycle's window reproduces the cycle's reward rows;
- the Dagster cadence sensor skips (previous running / too early / too few rows), starts, and records why;
- the cycle's measure steps alone (the demo's A/B tail) leave a cycle that the cadence resumes without redoing them;
- a real Prometheus scrapes serving, the collector, the archiver and the cycle's exporter on the generated
  configuration: every documented metric is there with its source's value, and `rtrl status --json` agrees;
- a treatment checkpoint that breaks its tool calls fires the broken-tool-call alert within one cycle.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from infra.argv import rtrl_argv
from infra.config import load_config, render_overrides
from infra.orchestrator import steps
from infra.orchestrator.clock import AcceleratedClock, clock_path
from infra.orchestrator.demo import core_settings
from infra.orchestrator.ledger import DONE, Ledger
from infra.orchestrator.rtrl_cli import RtrlCli
from registry.client import Registry
from schemas.reward_table import read_reward_table
from schemas.api_keys import KeyStore
from tests.conftest import free_port, free_port_pair
from tests.integration.prometheus import prometheus
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive, pytest.mark.timeout(1800)]
REPO = Path(__file__).parents[2]
SPEED = 600.0
GATE_PASSES = ["gate.tasks.margin=0.5", "gate.tasks.anchor_margin=0.5", "gate.tasks.min_tasks=2",
               "gate.tasks.min_pairs=2", "gate.tasks.suite_tasks=10", "gate.tasks.samples_per_task=2",
               "gate.tasks.guardrails.broken_tool_calls=1.0", "gate.tasks.guardrails.edit_rate=1.0",
               "gate.tasks.guardrails.needless_questions=1.0", "gate.tasks.guardrails.median_completion_tokens=10.0",
               'gate.suites=["tasks"]']   # the users suite: tests/integration/test_cycle_executors.py


class Loop:
    def __init__(self, state: Path, v0: Path):
        self.state = state
        self.prometheus_port = free_port()
        self.overrides = [f'state_dir="{state}"', f"kafka.port={free_port_pair()}", f"serving.port={free_port()}",
                          f"archive.metrics_port={free_port()}", f"monitoring.port={free_port()}",
                          "monitoring.scrape_interval_s=1", "archive.cluster_check_s=1",
                          f'monitoring.prometheus_url="http://127.0.0.1:{self.prometheus_port}"',
                          f"mlflow.ui_port={free_port()}", f"collector.port={free_port()}",
                          f'policy.base_checkpoint="{v0}"', "trainer.min_rows=16", "trainer.rows_per_step=64",
                          'orchestrator.clock="accelerated"', "orchestrator.min_mature_rows=5",
                          "orchestrator.interval_s=7200", "orchestrator.deploy_timeout_s=300",
                          "simulator.privacy_rate=0.0", "trainer.threads=1",
                          *render_overrides(core_settings(os.cpu_count())),
                          "gate.tasks.via_serving=true",          # as `rtrl demo`: the gate runs on serving's engines,
                          "serving.spare_engines=1",        # its candidates take serving's warm spare engine
                          "gate.tasks.reuse_episodes=true",       # and a champion's episodes are measured once
                          *GATE_PASSES]
        self.cfg = load_config(None, self.overrides)
        self.cli = RtrlCli(None, self.overrides, state / "test-logs", timeout_s=900)
        # simulated time: 600x from two days ago, so no event time passes the present
        start = (datetime.now(timezone.utc) - timedelta(days=2)).replace(microsecond=0)
        self.clock = AcceleratedClock(start.isoformat(), time.time(), SPEED)
        self.clock.save(clock_path(state))

    def rtrl(self, *args: str, step: str, ok=(0,)) -> dict:
        return self.cli.run(*args, step=step, ok_codes=ok)[1]

    def traffic(self, seconds: float, seed: int) -> dict:
        """Simulated users on serving for `seconds` of wall time, stamped on the loop's clock."""
        out = self.rtrl("--set", f'simulator.start_time="{self.clock.now().isoformat()}"', "simulate", "--users",
                        "12", "--duration", str(seconds), "--speed", str(SPEED), "--seed", str(seed), step="simulate")
        return out["simulate"]

    def cycle(self, cycle_id: str, extra: list[str] = ()) -> steps.CycleRecord:
        """The in-process executor: every step in this process."""
        cfg = load_config(None, [*self.overrides, *extra])
        ctx, ledger = steps.context_for(cfg, cycle_id, self.clock.now(), log=lambda m: print(m, flush=True),
                                        overrides=[*self.overrides, *extra])
        return steps.run_cycle(ctx, ledger)

    def health(self) -> dict:
        return steps.serving_status(self.cfg)


@pytest.fixture(scope="module")
def loop(bootstrapped, tmp_path_factory):
    state, _, _ = bootstrapped
    v0 = Registry.from_config(load_config(None, [f'state_dir="{state}"'])).local_path("1")
    lp = Loop(tmp_path_factory.mktemp("cycle-loop"), v0)
    from infra.stack.stack import Stack

    stack = Stack(lp.cfg)
    stack.up(log=lambda *_: None)
    try:
        lp.rtrl("bootstrap", step="bootstrap")
        lp.cli.run("archive", "--detach", step="archive", expect_json=False)
        lp.cli.run("serve", "--detach", step="serve", expect_json=False)
        lp.collector_key = KeyStore(lp.cfg.path_or_default("", "collector_keys.json")).create(
            "monitoring-test", org="org-a", role="client")
        lp.cli.run("collector", "--detach", step="collector", expect_json=False)
        lp.rtrl("metrics", "--detach", step="metrics")
        lp.cli.run("metrics", "--scrape-config", str(lp.state / "prometheus.yml"), step="scrape-config",
                   expect_json=False)
        with prometheus(lp.state / "prometheus.yml", lp.state / "prometheus", lp.prometheus_port) as prom:
            lp.prom = prom
            yield lp
    finally:
        stack.down(log=lambda *_: None)


def _versions_of_cycle(registry, cycle: str) -> list[str]:
    return [str(mv.version) for mv in registry.client.search_model_versions(f"name = '{registry.model}'")
            if (mv.tags or {}).get("cycle") == cycle]


@pytest.fixture(scope="module")
def cycle_c1(loop):
    """Cycle c1 on fresh traffic, crashed after every step in turn and resumed each time, then run to the end:
    (the traffic, the ledger record after each crash, the final record). Every test that builds on c1 asks for
    it, so no test depends on another having run first."""
    traffic = loop.traffic(30, seed=1)
    crashed = []
    with pytest.MonkeyPatch.context() as mp:
        for step in steps.STEPS:                   # crash after every step in turn; each rerun resumes
            mp.setenv(steps.FAIL_AFTER_ENV, step)
            with pytest.raises(steps.InjectedFailure):
                loop.cycle("c1")
            crashed.append((step, Ledger(loop.state).load("c1")))
    return traffic, crashed, loop.cycle("c1")


@pytest.fixture(scope="module")
def cycle_c2(loop, cycle_c1):
    """Cycle c2 after c1, on new traffic, with a gate that cannot pass (too few tasks for its decision):
    (the champion and the serving swaps before it, its record)."""
    registry = Registry.from_config(loop.cfg)
    champion = registry.version_of("champion")
    swaps = len(loop.health().get("swaps", []))
    loop.traffic(20, seed=2)
    return champion, swaps, loop.cycle("c2", ["gate.tasks.min_tasks=1000"])     # fail closed


def test_a_cycle_with_a_failure_after_each_step_resumes_and_completes_exactly_once(loop, cycle_c1):
    traffic, crashed, rec = cycle_c1
    assert traffic["requests"] > 40
    assert [step for step, _ in crashed] == list(steps.STEPS)
    for step, failed in crashed:
        assert failed.status == "failed" and not failed.done(step), step
    assert rec.status == DONE, rec.error

    registry = Registry.from_config(loop.cfg)
    table = read_reward_table(loop.state / "rewards" / "table", "c1")
    assert table.height == rec.result("distill")["rows"] > 16
    assert table["request_id"].n_unique() == table.height, "a request's reward row exactly once"
    candidate = rec.result("train")["candidate"]
    assert _versions_of_cycle(registry, "c1") == [candidate], "one candidate however often train ran"
    gate_runs = registry.client.search_runs([registry.experiment_id(loop.cfg.gate.experiment)])
    assert len(gate_runs) == 1, "the gate ran once: the rerun read its decision back from the candidate's tags"
    assert rec.result("evaluate")["decision"] == "promote"
    assert registry.version_of("champion") == candidate and registry.version_of("previous") == "1"
    assert rec.result("deploy")["deployed"] and set(rec.result("deploy")["arms"].values()) == {candidate}
    health = loop.health()
    assert health["arms"]["treatment"]["version"] == candidate and health["arms"]["control"]["version"] == "1"
    # the gate staged the candidate on serving's spare engine (one reload) and the swap was a switch to it, no
    # second load (a stage gone before the swap would have retired into the pool and been reloaded for it);
    # nothing stays staged
    assert [s["from_version"] for s in health["swaps"] if s["to_version"] == candidate] == ["1"]
    assert health["staged"] == []
    assert (health["spares"]["reloads"], health["spares"]["kept_retired"]) == (1, 0), health["spares"]
    assert (loop.state / "ab" / "cycles" / "c1" / "result.json").exists()
    for step in steps.STEPS:   # the in-process executor ran every step's library function in this process
        assert rec.steps[step]["function"] == f"infra.orchestrator.steps.{step}", step
        assert rec.steps[step]["pid"] == os.getpid(), step


@pytest.mark.full   # a whole second cycle; the default tier's gate rejection is tests/integration/test_gate_end_to_end
def test_a_candidate_that_fails_the_gate_leaves_champion_and_serving_unchanged(loop, cycle_c2):
    registry = Registry.from_config(loop.cfg)
    champion, swaps, rec = cycle_c2
    assert rec.status == DONE, rec.error
    assert rec.result("evaluate")["decision"] == "keep_champion"
    # the champion was c1's candidate: its episodes from c1's gate were read, only the candidate's arm ran
    assert "champion_episodes" not in rec.result("evaluate")["seconds"]
    assert "candidate_episodes" in rec.result("evaluate")["seconds"]
    assert not rec.result("promote")["promoted"]
    assert registry.version_of("champion") == champion
    assert rec.result("deploy")["arms"] == {"treatment": champion}
    health = loop.health()
    assert health["arms"]["treatment"]["version"] == champion and len(health.get("swaps", [])) == swaps
    assert health["staged"] == [], "the rejected candidate's engine was unstaged"
    candidate = rec.result("train")["candidate"]
    assert registry.info(candidate).tags["gate.decision"] == "keep_champion"


def test_the_replay_job_over_a_cycles_window_reproduces_its_reward_rows(loop, cycle_c1):
    import dagster as dg

    from infra.orchestrator import definitions

    cycle_rows = read_reward_table(loop.state / "rewards" / "table", "c1")
    start = cycle_rows["request_time"].min()
    end = cycle_rows["request_time"].max() + timedelta(microseconds=1)
    out = loop.state / "replay-c1"
    resource = definitions.RtrlResource(overrides=loop.overrides)

    def replayed_whole_window() -> bool:
        result = definitions.replay_job.execute_in_process(
            run_config={"ops": {"replay_window": {"config": {"start": start.isoformat(), "end": end.isoformat(),
                                                             "out": str(out)}}}},
            resources={"rtrl": resource}, instance=dg.DagsterInstance.ephemeral())
        assert result.success
        return read_reward_table(out)["request_id"].is_in(cycle_rows["request_id"].implode()).sum() == \
            cycle_rows.height

    # the archiver flushes every couple of seconds: replay until it holds the whole window
    wait_for(replayed_whole_window, 120, "a replay over the whole archived window", interval_s=5)
    replayed = read_reward_table(out).filter(pl.col("request_id").is_in(cycle_rows["request_id"].implode()))
    assert replayed.height == cycle_rows.height
    cols = [c for c in cycle_rows.columns]
    assert replayed.select(cols).sort("request_id").equals(cycle_rows.select(cols).sort("request_id"))
    with pytest.raises(Exception, match="production reward table"):
        definitions.replay_job.execute_in_process(
            run_config={"ops": {"replay_window": {"config": {"start": start.isoformat(), "end": end.isoformat(),
                                                             "out": str(loop.state / "rewards" / "table")}}}},
            resources={"rtrl": resource}, instance=dg.DagsterInstance.ephemeral())


def test_the_cadence_sensor_skips_with_reasons_then_starts_a_cycle(loop, cycle_c1):
    import dagster as dg

    from infra.orchestrator import definitions
    from infra.orchestrator.ledger import CycleRecord

    resource = definitions.RtrlResource(overrides=loop.overrides)
    instance = dg.DagsterInstance.ephemeral()

    def tick():
        return definitions.cadence_sensor(dg.build_sensor_context(instance=instance, resources={"rtrl": resource}))

    ledger = Ledger(loop.state)
    last, nxt = ledger.all()[-1], ledger.next_id()     # c1 (c2 too in the full tier) and the one after it
    # too early: the clock sits just after the last cycle started
    AcceleratedClock(last.started_at, time.time(), 0.0).save(clock_path(loop.state))
    assert isinstance(r := tick(), dg.SkipReason) and r.skip_message.startswith("too early")
    # previous still running: a running record whose runner (this process) is alive
    later = datetime.fromisoformat(last.started_at) + timedelta(hours=3)
    AcceleratedClock(later.isoformat(), time.time(), 0.0).save(clock_path(loop.state))
    ledger.save(CycleRecord(nxt, last.seq + 1, later.isoformat(), time.time(), runner_pid=os.getpid()))
    assert isinstance(r := tick(), dg.SkipReason) and f"{nxt} is still running" in r.skip_message
    (ledger.root / f"{nxt}.json").unlink()
    # too few mature rows: no traffic since the last cycle's range
    assert isinstance(r := tick(), dg.SkipReason) and r.skip_message.startswith("too few mature rows: 0")
    # new mature traffic: start the next cycle
    AcceleratedClock.load(clock_path(loop.state))
    loop.clock = AcceleratedClock(later.isoformat(), time.time(), SPEED)
    loop.clock.save(clock_path(loop.state))
    loop.traffic(10, seed=3)
    far = loop.clock.now() + timedelta(hours=2)
    AcceleratedClock(far.isoformat(), time.time(), 0.0).save(clock_path(loop.state))
    r = tick()
    assert isinstance(r, dg.SensorResult) and [q.partition_key for q in r.run_requests] == [nxt]
    reasons = [json.loads(line) for line in (loop.state / "orchestrator" / "cadence.jsonl").read_text().splitlines()]
    assert [x["start"] for x in reasons[-4:]] == [False, False, False, True]
    assert reasons[-1]["cycle_id"] == nxt and reasons[-1]["mature_rows"] >= 5


@pytest.mark.full   # a second cycle then a third: the demo runs this tail every cycle
def test_the_measure_steps_alone_measure_the_next_range_and_leave_its_cycle_to_be_resumed(loop, cycle_c2):
    """`rtrl demo`'s A/B tail: the cycle job with MEASURE_SELECTION runs collect..measure of the next cycle; the
    cycle stays running, the cadence resumes it once its runner is gone, and the resumed run does not redo them."""
    import dagster as dg

    from infra.orchestrator import definitions
    from infra.orchestrator.cadence import decide

    ledger = Ledger(loop.state)
    cid = ledger.next_id()
    loop.traffic(10, seed=4)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(definitions.cycles.name, [cid])
    job = dg.Definitions(assets=definitions.cycle_assets, jobs=[definitions.cycle_job],
                         resources={"rtrl": definitions.RtrlResource(overrides=loop.overrides)}
                         ).resolve_job_def(definitions.CYCLE_JOB)
    # in two runs, as the demo does when it stops its users once the range is fixed: collect, then the rest
    for part in (definitions.MEASURE_SELECTION[:1], definitions.MEASURE_SELECTION[1:]):
        result = job.execute_in_process(partition_key=cid, instance=instance, asset_selection=part)
        assert result.success
    rec = ledger.load(cid)
    assert [s for s in steps.STEPS if rec.done(s)] == list(definitions.MEASURE_STEPS)
    assert rec.status == "running" and rec.result("measure")["measured"], rec.result("measure")
    assert (loop.state / "ab" / "cycles" / cid / "result.json").exists()

    d = decide(loop.clock.now(), ledger.latest(), lambda: 0, 7200, 5, alive=lambda r: False,
               crashed=lambda r: definitions.run_crashed(instance, r))   # its run succeeded: no failure
    assert d.start and d.resume and d.cycle_id == cid, d.reason
    measured = rec.steps["measure"]
    rec = loop.cycle(cid)
    assert rec.status == DONE or (rec.status == "blocked" and rec.error.startswith("train")), rec.error
    assert rec.steps["measure"] == measured, "the resumed cycle did not measure again"


def _documented_metrics() -> list[str]:
    """Every metric name in docs/monitoring.md's tables (a histogram is checked by its _count series)."""
    import re

    names = []
    for line in (REPO / "docs" / "monitoring.md").read_text().splitlines():
        if line.startswith("| `rtrl_"):
            names += re.findall(r"`(rtrl_[a-z0-9_]+)`", line.split("|")[1])
    return names


def _per_arm(trajectories: dict[str, dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in trajectories.values():
        out[t["arm"]] = out.get(t["arm"], 0) + 1
    return out


def _trajectories(loop, want) -> dict[str, dict]:
    """{request_id: trajectory} from Kafka, read until the requests per arm are `want()` (asked again at each poll:
    Prometheus's newest scrape may predate the last request)."""
    from schemas.topics import topic_for
    from tests.integration.kafka_read import read_json_records

    topic = topic_for("trajectory")
    parts = [(topic, p) for p in range(loop.cfg.kafka.partitions_for(topic))]

    seen = {}

    def enough(found: dict) -> bool:
        seen.update(kafka=_per_arm(found), prometheus=want())
        return seen["kafka"] == seen["prometheus"]

    try:
        return read_json_records(loop.cfg.kafka.bootstrap(), parts, lambda d: d.get("request_id"), enough, 90)
    except AssertionError as e:
        raise AssertionError(f"{e}; requests per arm: {seen}") from None


def _collector_traffic(loop) -> dict[str, int]:
    """Two valid events, one invalid (schema) and one with a bad key through the collector: its answers."""
    import uuid

    fixtures = REPO / "schemas" / "fixtures"
    now = datetime.now(timezone.utc).isoformat()

    def event(kind: str, **changes) -> dict:
        d = json.loads((fixtures / kind / "v1.json").read_text())
        return {**d, "event_id": str(uuid.uuid4()), "event_time": now, **changes}

    url = f"http://127.0.0.1:{loop.cfg.collector.port}/v1/events"
    good = {"Authorization": f"Bearer {loop.collector_key}"}
    import httpx

    answers = [httpx.post(url, json={"events": [event("edit_applied"), event("followup_message")]}, headers=good,
                          timeout=30),
               httpx.post(url, json={"events": [event("edit_applied", user_id="")]}, headers=good, timeout=30),
               httpx.post(url, json={"events": [event("edit_applied")]}, headers={"Authorization": "Bearer nope"},
                          timeout=30)]
    out: dict[str, int] = {}
    for r in answers:
        out[str(r.status_code)] = out.get(str(r.status_code), 0) + 1
    assert answers[0].status_code == 200 and answers[2].status_code == 401, [a.text for a in answers]
    return out


def _stream_one(loop) -> None:
    """One streamed chat request through the gateway (time to first token is measured on streams only)."""
    import httpx

    body = {"model": "rtrl", "messages": [{"role": "user", "content": "fix the bug in util.py"}], "stream": True,
            "max_tokens": 8, "user": "monitoring-test-user"}
    with httpx.stream("POST", f"http://127.0.0.1:{loop.cfg.serving.port}/v1/chat/completions", json=body,
                      timeout=120) as r:
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line]   # to its end: a client that leaves early cuts it short
    assert lines[-1] == "data: [DONE]", lines[-3:]


def test_prometheus_scrapes_every_documented_metric_with_its_sources_value(loop, cycle_c1):
    import shutil as sh

    import httpx

    from pipelines.archive.layout import archive_root
    from pipelines.archive.reader import archived_event_ids

    prom = loop.prom
    answers = _collector_traffic(loop)
    _stream_one(loop)
    wait_for(lambda: set(prom.targets().values()) == {"up"} and len(prom.targets()) == 4, 60,
             lambda: f"every target up (targets: {prom.targets()})")

    # serving: requests answered per arm == the requests whose trajectories are in Kafka, tokens == their tokens
    def answered() -> dict[str, int]:
        return {m["arm"]: int(v) for m, v in prom.query(
            'sum by (arm) (rtrl_serving_requests_total{status="200", arm!="eval"})')}

    trajectories = _trajectories(loop, answered)        # reads until Kafka holds exactly these per arm
    before = answered()
    assert _per_arm(trajectories) == before
    for arm, n in before.items():
        mine = [t for t in trajectories.values() if t["arm"] == arm]
        assert len(mine) == n
        assert prom.value(f'sum(rtrl_serving_tokens_total{{arm="{arm}", kind="completion"}})') == \
            sum(t["completion_tokens"] for t in mine)
        assert prom.value(f'sum(rtrl_serving_tokens_total{{arm="{arm}", kind="prompt"}})') == \
            sum(t["prompt_tokens"] for t in mine)
        assert prom.value(f'sum(rtrl_serving_request_duration_seconds_count{{arm="{arm}"}})') == n
    assert prom.value('sum(rtrl_serving_time_to_first_token_seconds_count)') == \
        prom.value('sum(rtrl_serving_request_duration_seconds_count{stream="true"})') >= 1
    wait_for(lambda: prom.value('rtrl_serving_telemetry_events_total{outcome="sent"}') == len(trajectories), 30,
             lambda: f"telemetry sent == {len(trajectories)} trajectories in Kafka")
    assert prom.value("rtrl_serving_telemetry_queue_depth") == 0
    assert prom.value("rtrl_serving_telemetry_spool_bytes") == 0
    assert prom.value("rtrl_serving_ready") == 1
    health = loop.health()
    registry = Registry.from_config(loop.cfg)
    for arm, a in health["arms"].items():
        assert prom.value(f'rtrl_serving_arm_info{{arm="{arm}", alias="{a["alias"]}", '
                          f'version="{a["version"]}"}}') == 1
        assert str(a["version"]) == registry.version_of(a["alias"])
    assert prom.value("sum(rtrl_serving_swaps_total)") == len(health.get("swaps", []))

    # the collector: what it answered and what Kafka acknowledged
    direct = httpx.get(f"http://127.0.0.1:{loop.cfg.collector.port}/metrics", timeout=10).text
    wait_for(lambda: all(prom.value(f'rtrl_collector_ingest_requests_total{{status="{status}"}}') == n
                         for status, n in answers.items()), 30,
             lambda: f"the collector's answers {answers} scraped (Prometheus: "
                     f"{prom.query('rtrl_collector_ingest_requests_total')}; the collector itself: "
                     f"{[x for x in direct.splitlines() if x.startswith('rtrl_collector_ingest_requests')]})")
    assert prom.value("rtrl_collector_events_accepted_total") == 2
    assert prom.value('rtrl_collector_events_rejected_total{reason="schema"}') == 1
    assert prom.value("rtrl_collector_auth_failures_total") == 1
    assert prom.value("rtrl_collector_kafka_produce_errors_total") == 0
    assert prom.value("rtrl_collector_ingest_duration_seconds_count") == sum(answers.values())

    # the archiver: rows written == the events in the archive; no lag once idle
    root = archive_root(loop.cfg)
    wait_for(lambda: prom.value("sum(rtrl_archive_consumer_lag_records)") == 0
             and prom.value("rtrl_archive_events_written_total") == len(archived_event_ids(root)), 90,
             lambda: f"archiver idle: lag {prom.value('sum(rtrl_archive_consumer_lag_records)')}, written "
                     f"{prom.value('rtrl_archive_events_written_total')} vs {len(archived_event_ids(root))} archived")
    assert 0 < time.time() - prom.value("rtrl_archive_last_commit_timestamp_seconds") < 600

    # the cycle's exporter: the ledger's latest cycle, the newest done one's reward rows, gate, A/B, monitors
    ledger = Ledger(loop.state)
    latest = ledger.latest()
    done = next(r for r in reversed(ledger.all()) if r.status == DONE)
    assert prom.value(f'rtrl_cycle_info{{cycle="{latest.cycle_id}", status="{latest.status}"}}') == 1
    for step, entry in latest.steps.items():
        if entry.get("status") == DONE and entry.get("seconds") is not None:
            assert prom.value(f'rtrl_cycle_step_seconds{{step="{step}"}}') == pytest.approx(entry["seconds"])
    assert prom.value("rtrl_cycle_reward_rows") == read_reward_table(loop.state / "rewards" / "table",
                                                                     done.cycle_id).height > 0
    assert prom.value("rtrl_cycle_reward_late_events") == done.result("distill").get("late_events", 0)
    assert prom.value("rtrl_cycle_cadence_seconds") == loop.cfg.orchestrator.interval_s
    assert prom.value(f'rtrl_gate_decision_info{{decision="{done.result("evaluate")["decision"]}"}}') == 1
    for arm, version in done.result("deploy")["arms"].items():
        assert prom.value(f'rtrl_champion_info{{arm="{arm}", version="{version}"}}') == 1
    measured = done.result("measure")
    for arm in ("control", "treatment"):
        assert prom.value(f'rtrl_ab_rate{{arm="{arm}", metric="edit_persistence"}}') == \
            pytest.approx(measured["edit_persistence_rate"][arm])
    for m in measured["monitors"]:
        assert prom.value(f'rtrl_ab_monitor_red{{metric="{m["metric"]}"}}') == (m["status"] == "red")
        for arm in ("control", "treatment"):
            if m[arm] is not None:
                assert prom.value(f'rtrl_ab_monitor_rate{{arm="{arm}", metric="{m["metric"]}"}}') == \
                    pytest.approx(m[arm])
    assert prom.value("rtrl_disk_size_bytes") == sh.disk_usage(loop.state).total
    assert prom.value("rtrl_registry_cache_max_bytes") == loop.cfg.retention.cache_max_bytes

    # every metric the docs list is scraped
    scraped = {m["__name__"] for m, _ in prom.query('count by (__name__) ({__name__=~"rtrl_.+"})')}
    missing = [n for n in _documented_metrics() if n not in scraped and f"{n}_count" not in scraped]
    assert not missing, f"documented but not scraped: {missing}"
    # vLLM's own statistics, one series per engine the gateway holds
    engines = {m["model_name"]: v for m, v in prom.query("vllm:generation_tokens_total")}
    assert {f"{v['version']}" for v in health["arms"].values()} <= {k.rsplit("/v", 1)[1] for k in engines}, engines
    assert sum(engines.values()) > 0
    assert all(0 <= v <= 1 for _, v in prom.query("vllm:kv_cache_usage_perc"))

    # `rtrl status --json`: every process, both arms, the last cycle, the alerts from this Prometheus
    out = subprocess.run(rtrl_argv("status", "--json", overrides=loop.overrides), capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    assert {p: v["metrics"] for p, v in st["processes"].items()} == {
        "serving": "up", "collector": "up", "archiver": "up", "metrics": "up"}
    assert st["stack"]["services"]["broker"]["running"]
    assert {a: v["serving_version"] for a, v in st["arms"].items()} == \
        {a: str(v["version"]) for a, v in health["arms"].items()}
    assert st["cycle"]["cycle"] == latest.cycle_id and st["cycle_metrics_from"] == "exporter"
    assert st["alerts"]["source"] == prom.url and st["alerts"]["error"] is None
    assert {a["alert"] for a in st["alerts"]["firing"]} == prom.firing()


def _tool_call_breaking_copy(src: Path, dst: Path) -> Path:
    """A copy of checkpoint `src` that never closes a tool call: the (tied) embedding rows of the first token of
    `</tool_call>` and of a role marker the policy never writes are swapped, so it writes the marker where it means
    to close a call. Every call it opens is broken; the rest of its behaviour is unchanged."""
    import shutil as sh

    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    from schemas.chat_format import SPECIAL_TOKENS
    from schemas.tool_protocol import CLOSE

    sh.copytree(src, dst)
    tok = AutoTokenizer.from_pretrained(dst)
    close, marker = tok.encode(CLOSE, add_special_tokens=False)[0], tok.convert_tokens_to_ids(SPECIAL_TOKENS[0])
    swapped = 0
    for f in dst.glob("*.safetensors"):
        tensors = load_file(f)
        for name, t in tensors.items():
            if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
                t[[close, marker]] = t[[marker, close]].clone()
                swapped += 1
        save_file(tensors, f, metadata={"format": "pt"})
    assert swapped, f"no embedding in {src}"
    return dst


@pytest.fixture(scope="module")
def hacking_cycle(loop, cycle_c1):
    """The treatment arm serves a checkpoint that breaks its tool calls; users come; the next cycle runs up to its
    measure step. (the version, the cycle's record)."""
    registry = Registry.from_config(loop.cfg)
    hacked = registry.register(_tool_call_breaking_copy(registry.local_path(registry.version_of("control")),
                                                        loop.state / "tool-call-breaker"),
                               tags={"kind": "test-tool-call-breaker"}, run_name="tool-call-breaker")
    registry.set_alias("champion", hacked)
    wait_for(lambda: set(steps.arms_on(loop.health(), "champion").values()) == {hacked}, 300,
             lambda: f"treatment serving v{hacked} (health: {loop.health()})")
    base = AcceleratedClock.load(clock_path(loop.state)).now() + timedelta(hours=1)   # after every earlier cycle
    loop.clock = AcceleratedClock(base.isoformat(), time.time(), SPEED)
    loop.clock.save(clock_path(loop.state))
    loop.traffic(20, seed=5)
    matured = loop.clock.now() + timedelta(hours=2)
    AcceleratedClock(matured.isoformat(), time.time(), 0.0).save(clock_path(loop.state))
    ledger = Ledger(loop.state)
    cid = ledger.next_id()
    ctx, ledger = steps.context_for(loop.cfg, cid, matured, log=lambda m: print(m, flush=True),
                                    overrides=loop.overrides)
    for step in ("collect", "distill", "validate", "measure"):
        steps.run_step(ctx, ledger, step)
    return hacked, ledger.load(cid)


def test_a_treatment_checkpoint_that_breaks_its_tool_calls_fires_its_alert_within_one_cycle(loop, hacking_cycle):
    _, rec = hacking_cycle
    monitors = {m["metric"]: m for m in rec.result("measure")["monitors"]}
    broken = monitors["broken_tool_call_rate"]
    assert broken["status"] == "red" and broken["treatment"] > broken["control"], monitors
    rate = 'rtrl_ab_monitor_rate{arm="treatment", metric="broken_tool_call_rate"}'
    wait_for(lambda: loop.prom.value(rate) == pytest.approx(broken["treatment"]), 60,
             lambda: f"Prometheus scraping this cycle's monitors (it has {loop.prom.value(rate)})")
    wait_for(lambda: "RtrlBrokenToolCallsRising" in loop.prom.firing(), 120,
             lambda: f"RtrlBrokenToolCallsRising firing (firing: {loop.prom.firing()}; exporter says "
                     f"{loop.prom.query('rtrl_ab_monitor_red')})")
