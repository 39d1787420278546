"""`rtrl bench decode` measures trainer.decode against transformers on the same model and says whether both made
the same tokens (its exit status depends on it)."""

import json
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from trainer.bootstrap.config import PolicyConfig

TINY = PolicyConfig(hidden_size=32, intermediate_size=64, layers=2, heads=2, max_position_embeddings=128,
                    copy_circuit=False)


@pytest.mark.slow
def test_both_decoders_are_timed_on_the_same_tokens_and_logits():
    from infra.bench.decode import run

    r = run(TINY, vocab=97, prompt_tokens=24, new_tokens=8, batch=4, threads=1, log=lambda _: None)
    assert r["same_tokens"] is True and r["max_abs_logit_diff"] < 1e-4
    assert r["lean_ms_per_token"] > 0 and r["transformers_ms_per_token"] > 0
    assert r["speedup_per_token"] == round(r["transformers_ms_per_token"] / r["lean_ms_per_token"], 2)
    assert r["lean_batch_s"] > 0 and r["transformers_batch_s"] > 0 and 4 <= r["batch_tokens"] <= 32
    assert (r["layers"], r["hidden"], r["batch"]) == (2, 32, 4)


@pytest.mark.integration
def test_the_command_prints_one_json_object_and_exits_0(tmp_path):
    sets = [f'state_dir="{tmp_path}"', "policy.hidden_size=32", "policy.intermediate_size=64", "policy.layers=2",
            "policy.heads=2", "policy.copy_circuit=false"]
    out = subprocess.run(rtrl_argv("bench", "decode", "--json", "--prompt-tokens", "16", "--new-tokens", "4",
                                   "--batch", "3", overrides=sets),
                         capture_output=True, text=True, cwd=Path(__file__).parents[3], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["benchmark"] == "decode" and result["same_tokens"] is True and result["hidden"] == 32
    assert "[bench] one sequence" in out.stderr
