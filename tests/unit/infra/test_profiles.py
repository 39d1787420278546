"""The model profiles (infra/configs/profiles/*.toml) are valid configs whose budgets agree with each other: the
trainer's length normalizer is serving's completion budget, the completion fits the context, the reward's length
penalty bites inside the budget, each family's tool-call format is the one its chat template speaks, LoRA only
where the profile says so, and the learning rates sit in the ranges docs/profiles.md justifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import CONFIGS_DIR, load_config, read_toml

PROFILES = CONFIGS_DIR / "profiles"
# profile -> (tool-call format, LoRA, learning-rate range)
EXPECTED = {"qwen2.5-0.5b": ("hermes", False, (1e-6, 1e-5)), "qwen2.5-1.5b": ("hermes", False, (5e-7, 2e-6)),
            "mistral-7b": ("mistral", True, (1e-5, 1e-4))}


def test_there_is_a_profile_of_each_size():
    assert sorted(p.stem for p in PROFILES.glob("*.toml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_profile_is_a_valid_config_with_consistent_budgets(name, tmp_path):
    raw = read_toml(PROFILES / f"{name}.toml")
    cfg = load_config(PROFILES / f"{name}.toml")
    fmt, lora, (lo, hi) = EXPECTED[name]
    assert cfg.policy.base_checkpoint and not Path(cfg.policy.base_checkpoint).is_absolute()   # the user's model
    assert cfg.trainer.max_tokens == cfg.serving.max_tokens < cfg.serving.max_model_len
    assert cfg.rewards.length_token_budget <= cfg.serving.max_tokens
    assert cfg.serving.tool_format == fmt and cfg.serving.dtype == "bfloat16" and not cfg.serving.enforce_eager
    assert lo <= cfg.trainer.lr <= hi
    assert cfg.trainer.rows_per_step % cfg.trainer.micro_batch == 0
    assert cfg.trainer.precision == "bf16" and cfg.trainer.gradient_checkpointing
    assert (cfg.trainer.lora_r > 0) == lora and ("lora_alpha" in raw["trainer"]) == lora
    assert cfg.serving.max_lora_rank >= cfg.trainer.lora_r   # serving accepts the adapters it trains
    engines = 3   # two arms and a staged candidate on one GPU
    assert 0 < engines * cfg.serving.gpu_memory_utilization <= 0.95


def test_the_cpu_default_stays_the_toy():
    cfg = load_config()
    assert cfg.policy.base_checkpoint == "" and cfg.serving.dtype == "float32" and cfg.serving.tool_format == "auto"
