"""The cycle with real components: broker, archiver, vLLM serving with two arms, simulated users, the Beam reward
job, the data-quality suite, DeepSpeed training, the gate (vLLM + sandbox), the registry and serving's hot swap.

- a cycle with a failure injected after each step in turn resumes and completes with exactly-once data;
- a candidate that fails the gate leaves the champion and serving unchanged;
- the Dagster replay job over the cycle's window reproduces the cycle's reward rows;
- the Dagster cadence sensor skips (previous running / too early / too few rows), starts, and records why;
- the cycle's measure steps alone (the demo's A/B tail) leave a cycle that the cadence resumes without redoing them.
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

from infra.config import load_config, render_overrides
from infra.orchestrator import steps
from infra.orchestrator.clock import AcceleratedClock, clock_path
from infra.orchestrator.demo import core_settings
from infra.orchestrator.ledger import DONE, Ledger
from infra.orchestrator.rtrl_cli import RtrlCli
from registry.client import Registry
from schemas.reward_table import read_reward_table
from tests.conftest import free_port, free_port_pair
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
        self.overrides = [f'state_dir="{state}"', f"kafka.port={free_port_pair()}", f"serving.port={free_port()}",
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
