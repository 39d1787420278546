"""The model profiles (infra/configs/profiles/*.toml) are valid configs whose budgets agree with each other: the
trainer's length normalizer is serving's completion budget, the completion fits the context, the reward's length
penalty bites inside the budget, each family's tool-call format is the one its chat template speaks, LoRA only
where the profile says so, and the learning rates sit in the ranges docs/profiles.md justifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.config import CONFIGS_DIR, RtrlConfig, load_config, read_toml, toml_value

PROFILES = CONFIGS_DIR / "profiles"
# Keys the profiles set that other work of issue 40 is adding to the config (trainer precision, checkpointing, LoRA
# and ranks; serving's GPU memory share and tensor parallelism). They are stripped before validation until those
# keys exist; the lead removes this set once that work is merged (test_pending_keys_are_still_unknown says when).
PENDING_KEYS = {"trainer.precision", "trainer.gradient_checkpointing", "trainer.lora_r", "trainer.lora_alpha",
                "trainer.ranks", "serving.gpu_memory_utilization", "serving.tensor_parallel_size"}
# profile -> (tool-call format, LoRA, learning-rate range)
EXPECTED = {"qwen2.5-0.5b": ("hermes", False, (1e-6, 1e-5)), "qwen2.5-1.5b": ("hermes", False, (5e-7, 2e-6)),
            "mistral-7b": ("mistral", True, (1e-5, 1e-4))}


def strip_pending(data: dict) -> dict:
    return {section: {k: v for k, v in keys.items() if f"{section}.{k}" not in PENDING_KEYS}
            if isinstance(keys, dict) else keys for section, keys in data.items()}


def load_profile(path: Path, tmp_path: Path) -> RtrlConfig:
    """The profile through `load_config`, its pending keys left out."""
    lines = []
    for section, keys in strip_pending(read_toml(path)).items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
    stripped = tmp_path / path.name
    stripped.write_text("\n".join(lines) + "\n")
    return load_config(stripped)


def test_there_is_a_profile_of_each_size():
    assert sorted(p.stem for p in PROFILES.glob("*.toml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_profile_is_a_valid_config_with_consistent_budgets(name, tmp_path):
    raw = read_toml(PROFILES / f"{name}.toml")
    cfg = load_profile(PROFILES / f"{name}.toml", tmp_path)
    fmt, lora, (lo, hi) = EXPECTED[name]
    assert cfg.policy.base_checkpoint and not Path(cfg.policy.base_checkpoint).is_absolute()   # the user's model
    assert cfg.trainer.max_tokens == cfg.serving.max_tokens < cfg.serving.max_model_len
    assert cfg.rewards.length_token_budget <= cfg.serving.max_tokens
    assert cfg.serving.tool_format == fmt and cfg.serving.dtype == "bfloat16" and not cfg.serving.enforce_eager
    assert lo <= cfg.trainer.lr <= hi
    assert cfg.trainer.rows_per_step % cfg.trainer.micro_batch == 0
    assert raw["trainer"]["precision"] == "bf16" and raw["trainer"]["gradient_checkpointing"] is True
    assert ("lora_r" in raw["trainer"]) == lora and ("lora_alpha" in raw["trainer"]) == lora
    engines = 3   # two arms and a staged candidate on one GPU
    assert 0 < engines * raw["serving"]["gpu_memory_utilization"] <= 0.95


def test_the_cpu_default_stays_the_toy():
    cfg = load_config()
    assert cfg.policy.base_checkpoint == "" and cfg.serving.dtype == "float32" and cfg.serving.tool_format == "auto"


def test_pending_keys_are_still_unknown():
    """Fails once the config knows a pending key: then drop it from PENDING_KEYS (and this test with the set)."""
    known = {f"{s}.{k}" for s, section in RtrlConfig.model_fields.items()
             if hasattr(section.annotation, "model_fields") for k in section.annotation.model_fields}
    assert not PENDING_KEYS & known, f"now in the config, remove from PENDING_KEYS: {sorted(PENDING_KEYS & known)}"
