"""In-process serving of registry versions (`infra.learning.checkpoints.servable`): a full checkpoint as it is, an
adapter merged into the checkpoint it applies to, once."""

import pytest
import torch

from infra.learning.checkpoints import servable
from tests.unit.trainer.tiny import sampled_rows, small_trainer_config, tiny_checkpoint

pytestmark = pytest.mark.slow       # the trainer's step builds DeepSpeed's CPU op (a process) on first use


def test_an_adapter_is_served_merged_into_its_base_and_a_full_checkpoint_as_it_is(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from registry.client import Registry, is_adapter
    from trainer.run import run_training

    reg = Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")
    v1 = reg.register(tiny_checkpoint(tmp_path / "v1"), tags={"parent": ""})
    reg.set_alias("champion", v1)
    part = tmp_path / "rewards" / "window=c1"
    part.mkdir(parents=True)
    sampled_rows(reg.local_path(v1), 32, version=v1).write_parquet(part / "part-0.parquet")
    cfg = small_trainer_config(lora_r=4, lora_alpha=8, min_rows=8)
    adapter = run_training(cfg, reg, tmp_path / "rewards", "c1", tmp_path / "train", log=lambda *_: None,
                           window="c1").candidate

    assert servable(reg, v1, tmp_path / "merged") == reg.local_path(v1)
    folder = servable(reg, adapter, tmp_path / "merged")
    assert not is_adapter(folder) and folder.parent == tmp_path / "merged"
    made = (folder / "config.json").stat().st_mtime_ns
    assert servable(reg, adapter, tmp_path / "merged") == folder and (folder / "config.json").stat().st_mtime_ns == made
    ids = torch.tensor([[1, 5, 9, 3]])
    base = AutoModelForCausalLM.from_pretrained(reg.local_path(v1), dtype=torch.float32)
    want = PeftModel.from_pretrained(base, str(reg.local_path(adapter))).eval()(ids).logits
    got = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()(ids).logits
    assert torch.allclose(got, want, atol=1e-5)
