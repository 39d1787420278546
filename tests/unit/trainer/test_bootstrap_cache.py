"""`rtrl bootstrap` keeps the default policy it made in `policy.cache_dir`; a bootstrap in another state dir
registers that copy instead of training, and `--fresh` trains again."""

import pytest

from registry.client import Registry
from tests.conftest import make_config
from trainer.bootstrap.bootstrap import METADATA, bootstrap

pytestmark = pytest.mark.slow       # MLflow's store and three tiny trainings (~30 s)

TINY = ["policy.vocab_size=400", "policy.hidden_size=32", "policy.intermediate_size=64", "policy.layers=2",
        "policy.heads=1", "policy.max_position_embeddings=512", "policy.copy_circuit=false", "policy.train_orgs=4",
        "policy.train_workspaces=6", "policy.tasks_per_workspace=3", "policy.steps=3", "policy.batch_size=4",
        "policy.warmup_steps=1", "policy.target_accuracy=0", "policy.eval_tasks=4",
        "policy.eval_max_new_tokens=4", "policy.threads=1"]


def _bootstrap(state, cache, *extra, fresh=False):
    cfg = make_config(state, f'policy.cache_dir="{cache}"', *TINY, *extra)
    lines: list[str] = []
    summary = bootstrap(cfg, log=lines.append, fresh=fresh)
    return summary, "\n".join(lines), Registry.from_config(cfg)


def test_a_second_state_dir_registers_the_cached_policy_and_fresh_trains_again(tmp_path):
    cache = tmp_path / "policy-v0"
    first, log1, reg1 = _bootstrap(tmp_path / "a", cache)
    assert first["kind"] == "bootstrap" and first["reused"] is None and "sft step" in log1
    assert (cache / METADATA).is_file() and f"kept a copy in {cache}" in log1
    made = (cache / "model.safetensors").read_bytes()
    assert (reg1.local_path("1") / "model.safetensors").read_bytes() == made

    second, log2, reg2 = _bootstrap(tmp_path / "b", cache, "policy.threads=2")      # how it runs: still current
    assert second["reused"] == str(cache) and "sft step" not in log2 and "reusing the default policy" in log2
    assert second["kind"] == "bootstrap" and reg2.info("1").tags["kind"] == "bootstrap"
    assert second["steps"] == first["steps"] and second["accuracy"] == first["accuracy"]
    assert (reg2.local_path("1") / "model.safetensors").read_bytes() == made

    other, log3, _ = _bootstrap(tmp_path / "c", cache, "policy.seed=1")              # another config: stale
    assert other["reused"] is None and "not reusing" in log3 and "seed differ" in log3 and "sft step" in log3
    again, log4, _ = _bootstrap(tmp_path / "d", cache, "policy.seed=1", fresh=True)
    assert again["reused"] is None and "sft step" in log4
