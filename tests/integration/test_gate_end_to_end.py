"""The gate end to end: `rtrl gate` serves both checkpoints with vLLM, drives them through the real harness and
sandbox on the generated held-out suite, decides, reports and tags. A checkpoint degraded by noise in its weights
is rejected, the champion stays, and `rtrl promote` refuses it.

Uses the session's bootstrapped v0 under a registered model of its own (so v0's own registry is untouched).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from registry.client import Registry
from tests.conftest import make_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).parents[2]
MODEL = "gate-e2e"
NOISE = 0.5   # Gaussian noise per tensor, in units of that tensor's own standard deviation


def _rtrl(state: Path, *args: str, model: str = MODEL, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(rtrl_argv(*args, overrides=[f'state_dir="{state}"', f'mlflow.registered_model="{model}"']),
                          capture_output=True, text=True, cwd=REPO, timeout=timeout)


def _degraded(src: Path, dest: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=gen) * NOISE * p.std())
    model.save_pretrained(dest)
    AutoTokenizer.from_pretrained(src).save_pretrained(dest)
    return dest


# (suite tasks, samples per task): the default tier's gate is a third of the full one's episodes
SIZES = [pytest.param(8, 2, id="small"), pytest.param(16, 3, id="full", marks=pytest.mark.full)]


@pytest.mark.parametrize("tasks,samples", SIZES)
def test_a_checkpoint_with_noisy_weights_is_rejected_and_cannot_be_promoted(bootstrapped, tmp_path, tasks, samples):
    state, _, _ = bootstrapped
    v0 = Registry.from_config(make_config(state)).local_path("1")
    model = f"{MODEL}-{tasks}x{samples}"
    registry = Registry.from_config(make_config(state, f'mlflow.registered_model="{model}"'))
    champion = registry.register(v0, tags={"test": "gate-e2e"})
    registry.set_alias("champion", champion)
    registry.set_alias("control", champion)      # the lineage's anchor (gate.anchor_alias): here the champion
    candidate = registry.register(_degraded(v0, tmp_path / "degraded"), tags={"test": "gate-e2e"})

    report = tmp_path / "report"
    out = _rtrl(state, "gate", candidate, "--tasks", str(tasks), "--samples", str(samples), "--out", str(report),
                model=model)
    assert out.returncode == 3, out.stderr[-4000:]
    gate = json.loads(out.stdout.strip().splitlines()[-1])["gate"]
    print(json.dumps(gate))
    # rejected: not shown non-inferior (v0 resolves few held-out tasks, so a few dozen pairs cannot prove
    # "inferior" either) and the guardrails that see the damage directly trip
    assert gate["decision"] == "keep_champion"
    assert all(r.startswith("tasks:") for r in gate["reasons"]), gate["reasons"]
    reasons = {r.removeprefix("tasks:") for r in gate["reasons"]}
    assert {"inferior", "inconclusive"} & reasons, reasons
    assert any(r.startswith("guardrail:") for r in reasons), reasons
    assert {"anchor:inferior", "anchor:inconclusive"} & reasons, reasons
    # the tasks suite kept the champion: the gate ended there, the users suite recorded as not run
    assert [(x["suite"], x["decision"]) for x in gate["suites"]] == [("tasks", "keep_champion"), ("users", "not_run")]
    assert (gate["candidate_version"], gate["champion_version"]) == (candidate, champion)
    assert gate["episodes"] == 3 * samples * gate["tasks"] and gate["tasks"] >= tasks - 2   # the anchor's too
    assert gate["arms_run"] == ["candidate", "champion"]
    assert gate["infra_failures"] == 0
    assert gate["resolved_champion"] >= gate["resolved_candidate"]
    if tasks >= 16:   # enough episodes for v0's few resolved tasks to show
        assert gate["resolved_champion"] > gate["resolved_candidate"]
    assert "[gate] candidate" in out.stderr and "flaky check" in out.stderr

    # every episode went through serving (the versions it reports) and grading (test outcomes)
    episodes = [json.loads(line) for line in (report / "episodes.jsonl").read_text().splitlines()]
    assert {(e["arm"], e["policy_version"]) for e in episodes} == {("candidate", candidate), ("champion", champion),
                                                                   ("anchor", champion)}   # the champion's, reused
    assert all(e["notes"].get("tests") for e in episodes)
    assert {p.name for p in report.iterdir()} >= {"report.json", "report.md", "report.html", "episodes.jsonl"}
    assert json.loads((report / "report.json").read_text())["decision"] == "keep_champion"

    tags = registry.info(candidate).tags
    assert tags["gate.decision"] == "keep_champion" and tags["gate.champion_version"] == champion
    assert tags["gate.anchor_version"] == champion
    assert tags["gate.run_id"] == gate["mlflow_run_id"]
    assert tags["gate.suites"] == "tasks,users" and tags["gate.tasks.decision"] == "keep_champion"
    refused = _rtrl(state, "promote", candidate, model=model, timeout=300)
    assert refused.returncode == 3, refused.stderr
    assert registry.version_of("champion") == champion


@pytest.mark.full
def test_episodes_kept_for_a_checkpoint_spare_its_arm_when_the_same_bytes_are_champion_in_another_registry(
        bootstrapped, tmp_path):
    from evals.gate_run import keep_episodes, run_gate
    from evals.tasks.generate import generate_suite

    state, _, _ = bootstrapped
    v0 = Registry.from_config(make_config(state)).local_path("1")
    small = ["gate.tasks.suite_tasks=6", "gate.tasks.samples_per_task=2", "gate.tasks.reuse_episodes=true",
             f'gate.tasks.suite_dir="{tmp_path / "suite"}"']
    generate_suite(tmp_path / "suite", 6, seed=7)
    first = make_config(tmp_path / "first", *small)          # e.g. `rtrl demo --prepare`
    reg1 = Registry.from_config(first)
    kept = keep_episodes(first, reg1.register(v0), registry=reg1, log=print)
    assert kept is not None and kept.parent == tmp_path / "suite" / ".episode-cache"
    lines = kept.read_text().splitlines()
    assert lines and len(lines) % 2 == 0 and all(json.loads(line)["infra_error"] is None for line in lines)
    assert keep_episodes(first, "1", registry=reg1, log=print) == kept, "kept already: nothing runs"

    later = make_config(tmp_path / "later", *small)          # a later demo: a new registry, v0's same bytes
    reg2 = Registry.from_config(later)
    champion = reg2.register(v0)
    reg2.set_alias("champion", champion)
    candidate = reg2.register(_degraded(v0, tmp_path / "degraded"))
    run = run_gate(later, candidate, track=False, registry=reg2, log=print)
    assert "champion" not in run.timings and "candidate" in run.timings, run.timings
    champ = [e for e in run.episodes if e.arm == "champion"]
    assert len(champ) == len(lines) and {e.notes["reused_from"] for e in champ} == {str(kept)}
