"""ZeRO-3 on one rank against ZeRO-1: the same update over several micro-batches (each micro-step's gradient adds
to the last, although the trainer runs the module without `engine.forward`), and a saved checkpoint that holds the
gathered weights (the module's own tensors are empty shards at ZeRO-3) in the model's dtype."""

import pytest
import torch
from safetensors.torch import load_file

from tests.unit.trainer.tiny import sampled_rows, tiny_checkpoint
from trainer.config import TrainerConfig
from trainer.train import Trainer

pytestmark = pytest.mark.slow


def _train(folder, rows, run_dir, zero_stage):
    cfg = TrainerConfig(micro_batch=4, rows_per_step=16, lr=1e-3, max_tokens=8, min_rows=1, threads=1,
                        negative_weight=1.0, zero_stage=zero_stage, old_logprobs="parent")
    t = Trainer(cfg, rows, folder, run_dir)
    t.setup()
    summary = t.train()
    return load_file(t.save_checkpoint({}) / "model.safetensors"), summary.history[0].grad_norm


def test_zero3_accumulates_micro_batches_and_saves_the_gathered_weights_as_zero1_does(tmp_path):
    folder = tiny_checkpoint(tmp_path / "parent")
    rows = sampled_rows(folder, 16)
    before = load_file(folder / "model.safetensors")
    one, norm_one = _train(folder, rows, tmp_path / "z1", 1)
    three, norm_three = _train(folder, rows, tmp_path / "z3", 3)
    assert set(three) == set(before) and all(three[k].shape == before[k].shape for k in before)
    assert all(t.dtype == torch.float32 for t in three.values())
    assert max(float((one[k] - before[k]).abs().max()) for k in one) > 5e-4          # the step moved them
    assert max(float((one[k] - three[k]).abs().max()) for k in one) < 1e-6
    assert norm_three == pytest.approx(norm_one, rel=1e-5)
