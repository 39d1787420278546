"""`rtrl bench gpu --json` without a GPU: the dry run at toy size on the CPU prints every key of the GPU check with
sane values (the GPU figures come from the same code on a GPU, infra/gpu_check.sh)."""

import json
import math
import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).parents[2]


def test_the_cpu_dry_run_prints_every_key_with_sane_values():
    out = subprocess.run(rtrl_argv("bench", "gpu", "--json", "--size", "toy"), capture_output=True, text=True,
                         cwd=REPO, timeout=280)
    assert out.returncode == 0, out.stderr[-4000:]
    r = json.loads(out.stdout)
    assert r["benchmark"] == "gpu" and r["device"] == "cpu" and r["size"] == "toy"
    assert r["model"]["architecture"] == "Qwen2ForCausalLM"
    assert set(r["train"]) == {"bf16", "bf16_checkpointing", "lora"}
    for mode, t in r["train"].items():
        if "skipped" in t:
            assert mode == "lora" and t["skipped"] == "peft not installed"
            continue
        assert t["tokens_per_s"] > 0 and t["loss_finite"] and t["peak_memory_mb"] is None, mode
    if "skipped" not in r["train"]["lora"]:
        assert r["train"]["lora"]["trainable_params_m"] < r["train"]["bf16"]["trainable_params_m"]
    k = r["logprob_kernel"]
    assert k["triton"].startswith("skipped") and k["naive"]["ms"] > 0
    assert k["chunked"]["max_abs_diff_vs_naive"] < 1e-3
    m = r["logprob_match"]
    for key in ("fp32_generation_vs_fp32_recompute", "bf16_generation_vs_bf16_recompute",
                "bf16_generation_vs_fp32_recompute"):
        assert math.isfinite(m[key]["mean_abs"]) and 0 <= m[key]["mean_abs"] <= m[key]["max_abs"] < 0.5, key
    assert m["fp32_generation_vs_fp32_recompute"]["max_abs"] < 1e-4
    c = r["checkpoint"]
    assert c["save_s"] > 0 and c["load_s"] > 0 and c["size_mb"] > 0 and c["max_abs_diff_after_load"] == 0.0
    assert r["vllm"].startswith("skipped")
