"""Memory modes of the trainer on a tiny random Llama (DeepSpeed on CPU): bf16 mixed precision, activation
checkpointing and LoRA adapters train, save what transformers/peft load back, and agree with the float32
full-parameter trainer within stated tolerances."""

import json

import pytest
import torch
from safetensors.torch import load_file

from tests.unit.trainer.tiny import sampled_rows, small_trainer_config, tiny_checkpoint
from trainer.data import build_micro_batch
from trainer.logprobs import naive_token_logprobs
from trainer.train import Trainer

pytestmark = pytest.mark.slow

# bf16 log-probs of the tiny model against its float32 ones: bf16 weights and activations (8 mantissa bits)
BF16_LOGPROB_TOL = 2e-2


_cfg = small_trainer_config


def _trained(folder, rows, run_dir, base_dir=None, **kw):
    t = Trainer(_cfg(**kw), rows, folder, run_dir, base_dir=base_dir)
    t.setup()
    t.train()
    return t, t.save_checkpoint({"parent": "1"})


def _reference_logprobs(model_dir, mb):
    """Float32 log-probs of the completion tokens from the full logits (no fused path)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
    lp, _ = naive_token_logprobs(logits.reshape(-1, logits.shape[-1]), mb.targets.reshape(-1))
    return lp.reshape(mb.mask.shape)


def _delta(flat_update_a, flat_update_b):
    return float(torch.nn.functional.cosine_similarity(flat_update_a, flat_update_b, dim=0))


def _update(after: dict, before: dict) -> torch.Tensor:
    return torch.cat([(after[k].float() - before[k].float()).flatten() for k in sorted(before)])


def test_bf16_trains_in_float32_masters_saves_float32_and_its_logprobs_are_within_tolerance(parent, tmp_path):
    from transformers import AutoModelForCausalLM

    folder, rows = parent
    before = load_file(folder / "model.safetensors")
    fp32, out32 = _trained(folder, rows, tmp_path / "fp32")
    frozen = "model.layers.0.mlp.up_proj.weight"    # random values: its bf16 cast would change them
    bf16 = Trainer(_cfg(precision="bf16", frozen=[frozen]), rows, folder, tmp_path / "bf16")
    bf16.setup()
    assert next(bf16.engine.module.parameters()).dtype == torch.bfloat16
    mb = build_micro_batch(rows.head(8), torch.zeros(8), pad_id=0)
    lp16, _ = bf16._logprobs(bf16.engine.module, mb, grad=False)
    keep = mb.mask.bool()
    delta = (lp16[keep] - _reference_logprobs(folder, mb)[keep]).abs()
    assert float(delta.max()) < BF16_LOGPROB_TOL and float(delta.mean()) < BF16_LOGPROB_TOL / 4
    bf16.train()
    out16 = bf16.save_checkpoint({"parent": "1"})
    after16, after32 = load_file(out16 / "model.safetensors"), load_file(out32 / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in after16.values())
    assert json.loads((out16 / "config.json").read_text())["dtype"] == "float32"
    # the frozen parameter keeps the parent's float32 value exactly (not its bf16 cast)
    assert not torch.equal(before[frozen], before[frozen].bfloat16().float())
    assert torch.equal(after16[frozen], before[frozen])
    moved = [k for k in before if k != frozen]
    # saved from the float32 masters (not bf16 values) and each trained tensor moved, in fp32's direction
    assert all(not torch.equal(after16[k], after16[k].bfloat16().float()) for k in moved)
    assert all(not torch.equal(after16[k], before[k]) for k in moved)
    before_m = {k: before[k] for k in moved}
    cos = _delta(_update(after16, before_m), _update(after32, before_m))
    assert cos > 0.9, cos
    AutoModelForCausalLM.from_pretrained(out16, dtype="auto")   # transformers loads it as is
    assert fp32.summary.history[0].grad_norm == pytest.approx(bf16.summary.history[0].grad_norm, rel=0.05)


def test_a_bf16_run_killed_mid_way_resumes_to_the_same_float32_weights(parent, tmp_path):
    folder, rows = parent
    _, full = _trained(folder, rows, tmp_path / "full", precision="bf16")

    def crash(m):
        if m.step == 2:
            raise KeyboardInterrupt("killed")

    killed = Trainer(_cfg(precision="bf16"), rows, folder, tmp_path / "resumed", on_step=crash)
    killed.setup()
    with pytest.raises(KeyboardInterrupt):
        killed.train()
    t, resumed = _trained(folder, rows, tmp_path / "resumed", precision="bf16")
    assert t.summary.resumed_from_step == 2
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)   # the float32 masters came back


def test_a_16_bit_precision_needs_zero_and_the_lm_head_cannot_be_adapted():
    with pytest.raises(ValueError, match="zero_stage >= 1"):
        _cfg(precision="bf16", zero_stage=0)
    with pytest.raises(ValueError, match="lm_head"):
        _cfg(lora_r=4, lora_target_modules=["q_proj", "lm_head"])
    assert _cfg().precision == "fp32" and not _cfg().gradient_checkpointing and _cfg().lora_r == 0


def _count_layer_forwards(trainer) -> int:
    """Decoder-layer forwards in one micro-step (forward + backward): 1 per layer, 2 when checkpointing recomputes."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    calls = []
    layers = [m for m in trainer.engine.module.modules() if isinstance(m, GradientCheckpointingLayer)]

    def counted(forward):
        def run(*args, **kwargs):
            calls.append(1)
            return forward(*args, **kwargs)
        return run

    for layer in layers:   # the forward itself: checkpoint's recompute skips module hooks
        layer.forward = counted(layer.forward)
    step = trainer.plan[0]
    start, end = step.micro[0]
    trainer._micro_step(start, end, step.rows, boundary=False)
    return len(calls) // len(layers)


@pytest.mark.parametrize("mode", [{}, {"lora_r": 4}])
def test_gradient_checkpointing_recomputes_the_layers_on_the_fused_path_and_gives_the_same_update(parent, tmp_path,
                                                                                                  mode):
    folder, rows = parent
    counts = {}
    for on in (False, True):
        t = Trainer(_cfg(gradient_checkpointing=on, **mode), rows, folder, tmp_path / f"count{on}")
        t.setup()
        counts[on] = _count_layer_forwards(t)
    assert counts == {False: 1, True: 2}
    if mode:
        return
    _, plain = _trained(folder, rows, tmp_path / "plain")
    _, ckpt = _trained(folder, rows, tmp_path / "ckpt", gradient_checkpointing=True)
    a, b = load_file(plain / "model.safetensors"), load_file(ckpt / "model.safetensors")
    assert all(torch.allclose(a[k], b[k], atol=1e-6, rtol=0) for k in a)   # the same float32 ops, recomputed


def test_lora_trains_only_the_adapter_and_its_saved_folder_reloads_to_the_same_logits(parent, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.adapters import is_adapter, merged

    folder, rows = parent
    before = load_file(folder / "model.safetensors")
    t, out = _trained(folder, rows, tmp_path / "lora", lora_r=4, lora_alpha=8)
    names = [n for n, p in t.engine.module.named_parameters() if p.requires_grad]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    base_now = {n.replace("base_model.model.", "").replace(".base_layer", ""): p.detach()
                for n, p in t.engine.module.named_parameters() if not p.requires_grad}
    assert all(torch.equal(base_now[k], before[k]) for k in before)           # the base did not move
    assert is_adapter(out) and {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json",
                                "rtrl_metadata.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "model.safetensors").exists()
    lora_b = [v for k, v in load_file(out / "adapter_model.safetensors").items() if "lora_B" in k]
    assert lora_b and all(v.abs().max() > 0 for v in lora_b)                  # B starts at 0: it trained
    ids = torch.tensor([rows["prompt_token_ids"][0].to_list() + rows["completion_token_ids"][0].to_list()])
    with torch.no_grad():
        live = t.engine.module(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        reloaded = PeftModel.from_pretrained(base, str(out)).eval()(input_ids=ids).logits
        full = AutoModelForCausalLM.from_pretrained(merged(out, folder, tmp_path / "merged"), dtype=torch.float32)
        merged_logits = full.eval()(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()(input_ids=ids).logits
    torch.testing.assert_close(reloaded, live, atol=1e-5, rtol=0)
    torch.testing.assert_close(merged_logits, reloaded, atol=1e-5, rtol=0)
    assert float((merged_logits - plain).abs().max()) > 1e-3                  # the adapter changes the policy


def test_an_adapter_champion_continues_training_its_adapter_or_merges_into_a_full_model(parent, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from trainer.adapters import is_adapter

    folder, rows = parent
    _, first = _trained(folder, rows, tmp_path / "c1", lora_r=4, lora_alpha=8)
    t, second = _trained(first, rows, tmp_path / "c2", base_dir=folder, lora_r=8, precision="bf16")
    assert is_adapter(second)
    config = json.loads((second / "adapter_config.json").read_text())
    assert config["r"] == 4                                # the champion's adapter, not a new one of rank 8
    a, b = load_file(first / "adapter_model.safetensors"), load_file(second / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(v.dtype == torch.float32 for v in b.values())
    assert all(not torch.equal(a[k], b[k]) for k in a)   # every adapter tensor went on training
    cos = _delta(torch.cat([b[k].flatten() for k in sorted(a)]), torch.cat([a[k].flatten() for k in sorted(a)]))
    assert cos > 0.5                                       # from where it was, not from a fresh start
    # lora_r = 0 under an adapter champion: the merged policy, every parameter trained, saved full
    _, full = _trained(first, rows, tmp_path / "c3", base_dir=folder)
    assert not is_adapter(full) and (full / "model.safetensors").is_file()
    with pytest.raises(ValueError, match="base checkpoint folder"):
        Trainer(_cfg(lora_r=4), rows, first, tmp_path / "nobase").setup()
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    PeftModel.from_pretrained(base, str(second))        # peft loads the continued adapter


def test_an_adapter_candidate_is_registered_with_its_base_and_the_next_cycle_continues_it(parent, tmp_path):
    import polars as pl

    from registry.client import Registry
    from trainer.adapters import is_adapter, merged
    from trainer.run import run_training

    reg = Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")
    v1 = reg.register(tiny_checkpoint(tmp_path / "v1"), tags={"parent": ""})
    reg.set_alias("champion", v1)
    cfg = _cfg(lora_r=4, lora_alpha=8, min_rows=8)

    def table(cycle, rows):
        path = tmp_path / "rewards" / f"window={cycle}"
        path.mkdir(parents=True)
        rows.write_parquet(path / "part-0.parquet")

    table("c1", sampled_rows(reg.local_path(v1), 32, version=v1))
    r1 = run_training(cfg, reg, tmp_path / "rewards", "c1", tmp_path / "train", log=lambda *_: None, window="c1")
    tags = reg.info(r1.candidate).tags
    assert tags["adapter"] == "true" and tags["lora_base"] == v1 and tags["parent"] == v1
    adapter_dir = reg.local_path(r1.candidate)
    assert is_adapter(adapter_dir) and reg.local_path(r1.candidate) == adapter_dir          # cached once
    meta = json.loads((adapter_dir / "rtrl_metadata.json").read_text())
    assert meta["lora_base"] == v1
    assert json.loads((adapter_dir / "adapter_config.json").read_text())["base_model_name_or_path"] == \
        f"models:/policy/{v1}"
    reg.set_alias("champion", r1.candidate)
    served = merged(adapter_dir, reg.local_path(v1), tmp_path / "served")   # what the new champion served
    table("c2", sampled_rows(served, 32, seed=1, version=r1.candidate).with_columns(
        request_id=pl.col("request_id") + "-c2"))
    r2 = run_training(cfg, reg, tmp_path / "rewards", "c2", tmp_path / "train", log=lambda *_: None, window="c2")
    tags2 = reg.info(r2.candidate).tags
    assert tags2["adapter"] == "true" and tags2["lora_base"] == v1 and tags2["parent"] == r1.candidate
    a = load_file(adapter_dir / "adapter_model.safetensors")
    b = load_file(reg.local_path(r2.candidate) / "adapter_model.safetensors")
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)
