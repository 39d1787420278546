"""`rtrl bench learning` end to end, small: one cycle of the loop in one process (v0's traffic on new simulated
users as the cycle's traffic file, then production's steps by the in-process executor: the reward job and its sink,
validate, measure, training, the one gate against champion and v0, promotion), v0 and the champion scored on fixed
users, and the JSON a reader of the curve needs. The gate here is its users suite alone (the tasks suite starts
vLLM engines: test_gate_end_to_end covers it)."""

import json
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from registry.client import Registry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).parents[2]
SMALL = ["learning.train_users=24", "learning.cycle_hours=1.0", "learning.score_users=12", "learning.score_hours=0.5",
         "gate.users.users=12", "gate.users.hours=0.5", "learning.suite_samples=0", "trainer.min_rows=16",
         'gate.suites=["users"]']


def test_one_cycle_registers_a_gated_candidate_and_scores_the_champion_against_v0(bootstrapped, tmp_path):
    state, _, _ = bootstrapped
    cache = Registry(f"sqlite:///{state / 'mlflow.db'}", state / "mlflow-artifacts", "rtrl-policy",
                     state / "checkpoints").local_path("1")
    out = subprocess.run(rtrl_argv("bench", "learning", "--cycles", "1", "--seeds", "1", "--out", str(tmp_path),
                                   overrides=[f'state_dir="{tmp_path / "state"}"', f'policy.base_checkpoint="{cache}"',
                                              *SMALL]),
                         capture_output=True, text=True, cwd=REPO, timeout=850)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout)
    assert result["benchmark"] == "learning" and result["cycles"] == 1 and result["seeds"] == [0]
    lineage = result["lineages"][0]
    assert lineage["v0"]["rows"] > 0 and lineage["v0"]["edit_persistence_rate"] is not None
    (cycle,) = lineage["cycles"]
    assert cycle["champion_before"] == "1" and cycle["candidate"] == "2" and cycle["trained_rows"] == cycle["rows"]
    gate = cycle["gate"]
    assert cycle["decision"] == gate["decision"] in ("promote", "keep_champion")
    (suite,) = gate["suites"]
    assert suite["suite"] == "users" and suite["metric"] == "edit_persistence_rate"
    for against in ("vs_champion", "vs_anchor"):
        assert suite[against]["low"] <= suite[against]["diff"] <= suite[against]["high"], against
    assert set(cycle["seconds"]) >= {"traffic", "distill", "validate", "train", "evaluate", "promote"}
    assert cycle["dropped"] == {}, "every row of the cycle was the champion's, mature and rewarded"
    registry = Registry(f"sqlite:///{tmp_path / 'seed-0' / 'mlflow.db'}", tmp_path / "seed-0" / "mlflow-artifacts",
                        "rtrl-policy", tmp_path / "seed-0" / "checkpoints")
    tags = registry.info("2").tags
    assert tags["parent"] == "1" and tags["cycle"] == "c1" and tags["gate.decision"] == cycle["decision"]
    assert tags["gate.champion_version"] == "1" and tags["gate.anchor_version"] == "1"
    assert tags["gate.suites"] == "users" and tags["gate.users.decision"] == cycle["decision"]
    assert registry.version_of("champion") == cycle["champion"] == ("2" if cycle["decision"] == "promote" else "1")
    if cycle["decision"] == "promote":        # the new champion's point: every curve metric against v0
        assert set(cycle["score"]) == {"edit_persistence_rate", "dissatisfied_followup_rate", "broken_tool_call_rate",
                                       "edit_rate", "clarification_rate"}
        p = cycle["score"]["edit_persistence_rate"]
        assert p["ci_low"] <= p["diff"] <= p["ci_high"]
    curve = result["curve"]
    assert [row["cycle"] for row in curve["per_cycle"]] == [1]
    assert curve["slope_persistence_per_cycle"]["n"] == 1
    assert json.loads((tmp_path / "seed-0" / "cycles.jsonl").read_text())["candidate"] == "2"


@pytest.mark.full   # the default tier's time budget (docs/testing.md)
def test_serving_workers_kept_across_runs_serve_as_a_fresh_pool_does(bootstrapped):
    """The loop's serving runs share one set of worker processes: a run on kept workers gives the events a run on
    newly started ones gives (same slices, same seeds), and the processes are started once."""
    from infra.config import load_config
    from infra.offline_cycle import ServingWorkers, serve

    state, _, _ = bootstrapped
    v0 = Registry(f"sqlite:///{state / 'mlflow.db'}", state / "mlflow-artifacts", "rtrl-policy",
                  state / "checkpoints").local_path("1")
    sim = load_config(None, []).simulator.model_copy(update={"users": 4, "seed": 31})
    fresh = serve(v0, "1", sim, 0.5, 3, jobs=2)
    with ServingWorkers(2) as workers:
        first = serve(v0, "1", sim, 0.5, 3, jobs=workers)
        pool = workers._pool
        again = serve(v0, "1", sim, 0.5, 3, jobs=workers)
        assert pool is not None and workers._pool is pool
    assert workers._pool is None
    def story(served):   # every event but the wall-clock latency of each answer
        return [e.model_dump_json(exclude={"latency_ms"}) for e in served.events]

    assert fresh.requests > 0 and story(fresh) == story(first) == story(again)
