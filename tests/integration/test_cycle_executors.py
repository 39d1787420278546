"""One cycle, run two ways over the same inputs: the in-process executor (`steps.run_cycle`) and the Dagster job
(the service's assets and resource, each step through `steps.run_step`) each run cycle c1 in a state dir of its own,
from the same v0 and the same traffic file (`orchestrator.source = "files"`). The same step functions produced the
same reward rows, the same candidate (its weights' content digest) and the same gate decision, suite by suite.

The gate here is the users suite alone on a few users (the held-out tasks start vLLM engines: tests/integration/
test_gate_end_to_end.py covers them); both runs decide with `infra.gate_suites`, the one gate."""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from infra.config import load_config, render_overrides
from infra.orchestrator import steps
from infra.orchestrator.ledger import DONE, Ledger
from registry.client import Registry
from schemas.reward_table import read_reward_table

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1500)]

SMALL = ['orchestrator.source="files"', "trainer.min_rows=16", "trainer.rows_per_step=64", "trainer.max_rows=128",
         "trainer.threads=1", 'gate.suites=["users"]', "gate.users.users=8", "gate.users.hours=0.5",
         "gate.users.margin=0.5", "gate.users.anchor_margin=0.5", "learning.jobs=1"]


def _overrides(state: Path) -> list[str]:
    return [*render_overrides({"state_dir": state}), *SMALL]


@pytest.fixture(scope="module")
def traffic(bootstrapped, tmp_path_factory):
    """v0 and the events of 24 simulated users it served for half a simulated hour, sampled as serving samples."""
    from infra.learning.score import sampling_of
    from infra.offline_cycle import serve

    state, _, _ = bootstrapped
    v0 = Registry.from_config(load_config(None, [f'state_dir="{state}"'])).local_path("1")
    cfg = load_config(None, SMALL)
    sim = cfg.simulator.model_copy(update={"users": 24, "seed": 31, "privacy_rate": 0.0})
    served = serve(v0, "1", sim, 0.5, seed=3, **sampling_of(cfg))
    assert served.requests > 30
    return v0, served.events


def _state(tmp_path_factory, name: str, v0: Path, events) -> tuple[Path, object]:
    from pipelines.rewards.files_job import write_traffic

    state = tmp_path_factory.mktemp(name)
    cfg = load_config(None, _overrides(state))
    reg = Registry.from_config(cfg)
    version = reg.register(v0, tags={"bootstrap": "true"}, run_name="v0")
    reg.set_alias("champion", version)
    reg.set_alias("control", version)
    write_traffic(steps.traffic_file(cfg, "c1"), events)
    return state, cfg


@pytest.fixture(scope="module")
def in_process(traffic, tmp_path_factory):
    v0, events = traffic
    state, cfg = _state(tmp_path_factory, "in-process", v0, events)
    ctx, ledger = steps.context_for(cfg, "c1", datetime.now(timezone.utc), log=print, overrides=_overrides(state))
    return cfg, steps.run_cycle(ctx, ledger)


@pytest.fixture(scope="module")
def dagster_job(traffic, tmp_path_factory):
    import dagster as dg

    from infra.orchestrator import definitions

    v0, events = traffic
    state, cfg = _state(tmp_path_factory, "dagster", v0, events)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(definitions.cycles.name, ["c1"])
    job = dg.Definitions(assets=definitions.cycle_assets, jobs=[definitions.cycle_job],
                         resources={"rtrl": definitions.RtrlResource(overrides=_overrides(state))}
                         ).resolve_job_def(definitions.CYCLE_JOB)
    result = job.execute_in_process(partition_key="c1", instance=instance)
    assert result.success
    return cfg, Ledger(state).load("c1")


def test_both_executors_run_the_same_step_functions_to_the_same_rows_candidate_and_decision(in_process,
                                                                                           dagster_job):
    (cfg_a, a), (cfg_b, b) = in_process, dagster_job
    assert a.status == b.status == DONE, (a.error, b.error)
    for step in steps.STEPS:
        assert a.steps[step]["function"] == b.steps[step]["function"] == f"infra.orchestrator.steps.{step}"
    assert a.steps["train"]["pid"] == os.getpid(), "the in-process executor ran the step in this process"
    assert b.dagster_run_id and not a.dagster_run_id

    rows_a, rows_b = (read_reward_table(c.reward_table(), "c1") for c in (cfg_a, cfg_b))
    assert rows_a.height == a.result("distill")["rows"] > 30
    assert rows_a.sort("request_id").equals(rows_b.sort("request_id")), "the same reward rows"

    train_a, train_b = a.result("train"), b.result("train")
    assert train_a["counts"] == train_b["counts"] and train_a["steps"] == train_b["steps"] > 0
    digest_a = Registry.from_config(cfg_a).info(train_a["candidate"]).digest
    digest_b = Registry.from_config(cfg_b).info(train_b["candidate"]).digest
    assert digest_a and digest_a == digest_b, "the same candidate weights"

    gate_a, gate_b = a.result("evaluate"), b.result("evaluate")
    assert gate_a["decision"] == gate_b["decision"] and gate_a["reasons"] == gate_b["reasons"]
    assert [s["suite"] for s in gate_a["suites"]] == ["users"]
    for sa, sb in zip(gate_a["suites"], gate_b["suites"], strict=True):   # the same gate, suite by suite (sums of
        assert (sa["suite"], sa["decision"]) == (sb["suite"], sb["decision"])  # floats may differ in the last bits)
        for against in ("vs_champion", "vs_anchor"):
            assert sa[against] == pytest.approx(sb[against], rel=1e-9, abs=1e-12), against
    tags = Registry.from_config(cfg_a).info(train_a["candidate"]).tags
    assert tags["gate.suites"] == "users" and tags["gate.decision"] == gate_a["decision"]
    assert a.result("deploy")["deployed"] is False and "files" in a.result("deploy")["reason"]
    for cfg in (cfg_a, cfg_b):
        shutil.rmtree(cfg.state_path / "checkpoints", ignore_errors=True)
