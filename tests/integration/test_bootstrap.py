"""`rtrl bootstrap` for real: the default policy is made, registered as v0 with aliases champion and control, lands
in the accuracy band on fresh tasks, and a rerun does nothing; a base checkpoint is registered instead when set."""

import json
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from registry.client import Registry
from tests.conftest import make_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).parents[2]


def _rtrl(state: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(rtrl_argv(*args, overrides=[f'state_dir="{state}"']),
                          capture_output=True, text=True, cwd=REPO, timeout=timeout)


def _registry(state: Path) -> Registry:
    return Registry.from_config(make_config(state))


def test_v0_is_registered_with_champion_and_control(bootstrapped):
    state, summary, stderr = bootstrapped
    reg = _registry(state)
    assert summary["version"] == "1" and summary["kind"] == "bootstrap"
    assert reg.version_of("champion") == reg.version_of("control") == "1"
    tags = reg.info("1").tags
    assert tags["kind"] == "bootstrap" and tags["parent"] == ""
    assert float(tags["accuracy"]) == summary["accuracy"] and float(tags["broken_rate"]) == summary["broken_rate"]
    folder = reg.local_path("1")
    meta = json.loads((folder / "rtrl_metadata.json").read_text())
    assert meta["parent"] is None and meta["steps"] == summary["steps"] and meta["train_examples"] > 1000
    assert meta["final_loss"] < meta["first_loss"] / 5  # it learned
    assert meta["code_version"] != "" and meta["eval"]["sampled"]["edit_accuracy"] == summary["accuracy"]
    if summary["reused"]:     # set-up's v0 (the same code and config), registered as it is
        assert "reusing the default policy cached in" in stderr and "sft step" not in stderr
        cached = Path(summary["reused"]) / "model.safetensors"
        assert (folder / "model.safetensors").read_bytes() == cached.read_bytes()
    else:
        assert "sft step" in stderr and "eval sampled" in stderr  # progress lines


@pytest.fixture
def torch_threads():
    """Sets torch's thread count for the test (`torch_threads(n)`); the process's count is back after it."""
    import torch

    threads = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(threads)


@pytest.mark.full   # 400 fresh tasks, greedy and sampled: minutes
def test_v0_lands_in_the_band_on_fresh_tasks(bootstrapped, torch_threads):
    """Independent of the bootstrap's own evaluation: the registered folder, new workspaces, a new sampling seed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.bootstrap.corpus import generate_tasks
    from trainer.bootstrap.evaluate import evaluate

    state, summary, _ = bootstrapped
    folder = _registry(state).local_path("1")
    torch_threads(2)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tasks = generate_tasks(seed=4242, workspaces=100, tasks_per_workspace=4, orgs=16)  # ~40 ambiguous
    result = evaluate(model, tokenizer, tasks, max_new_tokens=192, batch_size=50, seed=4242, log=lambda _: None,
                      greedy=False)   # the band is on sampled decoding, as serving samples
    print(json.dumps({"bootstrap": summary, "fresh": result.to_dict()}))
    for accuracy, broken in ((summary["accuracy"], summary["broken_rate"]),
                             (result.sampled.edit_accuracy, result.sampled.broken_rate)):
        assert 0.30 <= accuracy <= 0.60 and broken > 0
    assert result.sampled.question_rate_ambiguous > result.sampled.question_rate_clear


def test_rerun_is_a_no_op(bootstrapped):
    state, summary, _ = bootstrapped
    out = _rtrl(state, "bootstrap", timeout=300)
    assert out.returncode == 0, out.stderr
    again = json.loads(out.stdout)
    assert again == {"version": "1", "skipped": True, "model": summary["model"]}
    assert "already points to version 1" in out.stderr
    reg = _registry(state)
    assert len(reg.client.search_model_versions(f"name='{reg.model}'")) == 1


@pytest.mark.full   # the default tier's time budget (docs/testing.md)
def test_base_checkpoint_is_registered_instead(bootstrapped, tmp_path):
    """Any HF causal-LM folder: here v0's files with different weights (a folder that is not the default policy)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    state, _, _ = bootstrapped
    src = _registry(state).local_path("1")
    other = tmp_path / "other-llama"
    model = AutoModelForCausalLM.from_pretrained(src)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    model.save_pretrained(other)
    AutoTokenizer.from_pretrained(src).save_pretrained(other)

    state2 = tmp_path / "state"
    out = _rtrl(state2, "--set", f'policy.base_checkpoint="{other}"', "bootstrap", timeout=600)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["kind"] == "base_checkpoint" and summary["version"] == "1" and summary["source"] == str(other)
    reg = _registry(state2)
    assert reg.version_of("champion") == reg.version_of("control") == "1"
    assert reg.info("1").tags["kind"] == "base_checkpoint"
    got = reg.local_path("1")
    assert (got / "model.safetensors").read_bytes() == (other / "model.safetensors").read_bytes()
    assert json.loads((got / "rtrl_metadata.json").read_text())["source"] == str(other)

    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "config.json").write_text("{}")
    bad = _rtrl(tmp_path / "state3", "--set", f'policy.base_checkpoint="{tmp_path / "not-a-model"}"', "bootstrap",
                timeout=600)
    assert bad.returncode == 1 and "does not load as a causal language model" in bad.stderr
    assert _registry(tmp_path / "state3").version_of("champion") is None
