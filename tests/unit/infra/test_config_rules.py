"""Rules across sections are checked when a config loads (`RtrlConfig`'s validators), not only by tests of the
checked-in files: a config that breaks one is refused with a message naming both keys and the fix."""

from __future__ import annotations

import pytest

from infra.config import ConfigError, load_config


@pytest.mark.parametrize("overrides, message", [
    (["trainer.max_tokens=256"],
     "trainer.max_tokens (256) must equal serving.max_tokens (192): serving's completion budget is the trainer's "
     "length normalizer (Dr. GRPO); set both to the same value"),
    (["serving.max_tokens=512"], "trainer.max_tokens (192) must equal serving.max_tokens (512)"),
    (["trainer.lora_r=32"],
     "trainer.lora_r (32) is over serving.max_lora_rank (16): serving would refuse the adapters the trainer makes; "
     "set serving.max_lora_rank = 32 or lower trainer.lora_r"),
    (["trainer.lora_r=600"],
     "trainer.lora_r (600) is over serving.max_lora_rank (16): serving would refuse the adapters the trainer makes; "
     "lower trainer.lora_r to at most 512 (the largest rank serving takes) and raise serving.max_lora_rank to it"),
    (["specialize.enabled=true", "specialize.lora_r=16", "serving.max_lora_rank=8"],
     "specialize.lora_r (16) is over serving.max_lora_rank (8): serving would refuse the adapters the trainer "
     "makes; set serving.max_lora_rank = 16 or lower specialize.lora_r"),
])
def test_a_config_breaking_a_rule_is_refused_naming_both_keys_and_the_fix(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value)
    assert "(got {" not in str(err.value) and "Value error" not in str(err.value)   # no dump of the whole table


def test_the_rules_hold_when_both_keys_change_together():
    cfg = load_config(None, ["trainer.max_tokens=1024", "serving.max_tokens=1024", "trainer.lora_r=32",
                             "serving.max_lora_rank=32"])
    assert (cfg.trainer.max_tokens, cfg.trainer.lora_r) == (1024, 32)


def test_the_orgs_adapters_are_checked_only_when_specialization_is_on():
    cfg = load_config(None, ["specialize.lora_r=16", "serving.max_lora_rank=8"])
    assert not cfg.specialize.enabled and cfg.specialize.lora_r == 16


def test_a_sections_own_check_names_its_keys_without_dumping_the_section():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["serving.require_key=false", "serving.host=0.0.0.0"])
    assert "serving: serving.require_key = false with host '0.0.0.0'" in str(err.value)
    assert "(got {" not in str(err.value)
