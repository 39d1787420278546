"""`rtrl bench gpu --json`: the GPU check, on a randomly initialized model of a real architecture and size.

    python -m infra.cli bench gpu --json [--size auto|toy|0.5b]      (or standalone: python -m infra.bench.gpu --json)

The model is Qwen2's architecture made here from a config (no download): at `0.5b` the size of Qwen2.5-0.5B
(hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied head); at `toy` a tiny one.
`auto` is 0.5b on a GPU and toy without one (a dry run on the CPU that prints the same keys, "device": "cpu").

  train               per mode, the trainer's update (decoder, then the output head fused with the sampled tokens'
                      log-probs, `trainer.logprobs.linear_token_logprobs`; a policy-gradient loss; AdamW) in a plain
                      torch loop under bf16 autocast: tokens/s and peak GPU memory. Modes: bf16 (fp32 weights and
                      AdamW states, bf16 compute), bf16 with gradient checkpointing, LoRA (peft: bf16 frozen base,
                      rank-16 adapters on every projection; "skipped" without peft)
  logprob_kernel      the sampled tokens' log-probs + entropy, forward and backward, from final hidden states and
                      the output head: naive (logits, log_softmax, gather), the chunked torch path and the fused
                      Triton kernel (CUDA only): time, peak memory beyond the inputs, largest difference to naive
  logprob_match       mean and max |log-prob difference| of the sampled tokens between transformers' generation
                      (its raw logits, `output_logits`) and the trainer's recomputation of the same sequences: bf16
                      generation vs bf16 and vs float32 recomputation, and float32 vs float32 (the reference: ~0)
  checkpoint          seconds to save the bf16 model (safetensors) and to load it back onto the device, its size
  vllm                "skipped: not installed" without vLLM; with it, on a GPU, vLLM's bf16 sampled-token log-probs
                      of the saved checkpoint vs the trainer's recomputation (what serving records vs what training
                      computes); on the CPU skipped (the dry run stays short)

Nothing here imports rtrl beyond `trainer.logprobs` (torch, and Triton on CUDA), so a GPU machine with only torch,
transformers, peft and triton runs it from a copy of the repository (infra/gpu_check.sh). Peak memory is
`torch.cuda.max_memory_allocated` (null on the CPU). Random weights make near-uniform distributions, so the
log-prob differences here are a floor for the rounding gap, not a trained model's.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

QWEN2_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)
QWEN2_TOY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=1024, tie_word_embeddings=True, max_position_embeddings=512)
# per size: train batch x sequence, warm-up and measured steps; kernel rows; generation batch, prompt, new tokens
SHAPES = {"0.5b": dict(batch=8, seq=1024, warmup=2, steps=5, kernel_rows=8192, gen_batch=4, prompt=64, new=128),
          "toy": dict(batch=2, seq=64, warmup=1, steps=2, kernel_rows=512, gen_batch=2, prompt=8, new=16)}
LORA_R, LORA_ALPHA = 16, 32
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def add_arguments(parser) -> None:
    parser.add_argument("--size", choices=("auto", "toy", "0.5b"), default="auto",
                        help="model size: 0.5b (Qwen2.5-0.5B's shape), toy, or auto (0.5b on a GPU, toy on the CPU)")
    parser.add_argument("--seed", type=int, default=0, help="weights, data and sampling seed (default 0)")


def _model_config(size: str):
    from transformers import Qwen2Config

    return Qwen2Config(**(QWEN2_05B if size == "0.5b" else QWEN2_TOY), bos_token_id=None, eos_token_id=None,
                       pad_token_id=0, use_cache=True)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _reset_peak(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mb(device, base: int = 0) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    return round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)


def _model(cfg, device, dtype, seed: int):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype, attn_implementation="sdpa")
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _policy_loss(model, ids, adv, impl: str):
    """The trainer's shape of update: decoder, head fused with the sampled tokens' log-probs, -(A * logp)."""
    from trainer.logprobs import linear_token_logprobs

    hidden = model.get_decoder()(input_ids=ids).last_hidden_state[:, :-1]
    head = model.get_output_embeddings()
    lp, ent = linear_token_logprobs(hidden.reshape(-1, hidden.shape[-1]), head.weight, ids[:, 1:].reshape(-1),
                                    impl=impl)
    return -(lp * adv.reshape(-1)).mean() - 0.0 * ent.mean()


def _train(mode: str, cfg, shape: dict, device, seed: int, log) -> dict:
    import torch

    if mode == "lora":
        try:
            import peft
        except ImportError:
            return {"skipped": "peft not installed"}
        model = _model(cfg, device, torch.bfloat16, seed)
        model = peft.get_peft_model(model, peft.LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0,
                                                           target_modules=LORA_TARGETS, task_type="CAUSAL_LM"))
        for p in model.parameters():      # adapters in float32 (their AdamW states too); the frozen base stays bf16
            if p.requires_grad:
                p.data = p.data.float()
        inner = model.get_base_model()
    else:
        model = inner = _model(cfg, device, torch.float32, seed)
        if mode == "bf16_checkpointing":
            inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    inner.config.use_cache = False
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator(device="cpu").manual_seed(seed)
    b, n = shape["batch"], shape["seq"]
    impl = "triton" if device.type == "cuda" else "chunked"
    losses, times = [], []
    _reset_peak(device)
    base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    for step in range(shape["warmup"] + shape["steps"]):
        ids = torch.randint(1, cfg.vocab_size, (b, n), generator=g).to(device)
        adv = torch.randn(b, n - 1, generator=g).to(device)
        _sync(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = _policy_loss(inner, ids, adv, impl)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        if step >= shape["warmup"]:
            times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    out = {"tokens_per_s": round(b * n * len(times) / sum(times), 1), "step_s": round(sum(times) / len(times), 4),
           "peak_memory_mb": _peak_mb(device), "weights_mb": round(base / 2**20, 1) if device.type == "cuda" else None,
           "trainable_params_m": round(sum(p.numel() for p in params) / 1e6, 3),
           "loss_finite": all(math.isfinite(x) for x in losses)}
    if mode == "lora":
        out.update(lora_r=LORA_R, lora_alpha=LORA_ALPHA)
    log(f"bench gpu: train {mode}: {out['tokens_per_s']} tokens/s, peak {out['peak_memory_mb']} MB")
    del model, inner, opt, params
    _reset_peak(device)
    return out


def _kernel(cfg, shape: dict, device, seed: int, log) -> dict:
    """Log-probs + entropy, forward and backward, of `kernel_rows` sampled tokens from bf16 hidden states."""
    import torch

    from trainer.logprobs import linear_token_logprobs, naive_token_logprobs

    n, hid, vocab = shape["kernel_rows"], cfg.hidden_size, cfg.vocab_size
    g = torch.Generator(device="cpu").manual_seed(seed)
    h0 = torch.randn(n, hid, generator=g).to(device, torch.bfloat16)
    w0 = (torch.randn(vocab, hid, generator=g) * 0.02).to(device, torch.bfloat16)
    tokens = torch.randint(0, vocab, (n,), generator=g).to(device)
    out: dict = {"rows": n, "hidden": hid, "vocab": vocab, "dtype": "bfloat16"}
    ref = None
    impls = ["naive", "chunked", "triton"]
    for impl in impls:
        if impl == "triton" and device.type != "cuda":
            out[impl] = "skipped: no CUDA device (the Triton kernel runs on GPUs)"
            continue
        h, w = h0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
        times = []
        for rep in range(3):      # the first run compiles (Triton) and warms up
            h.grad = w.grad = None
            _reset_peak(device)
            base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
            _sync(device)
            t0 = time.perf_counter()
            if impl == "naive":
                lp, ent = naive_token_logprobs((h @ w.t()).float(), tokens)
            else:
                lp, ent = linear_token_logprobs(h, w, tokens, impl=impl)
            (lp.sum() + ent.sum()).backward()
            _sync(device)
            times.append(time.perf_counter() - t0)
        peak = _peak_mb(device, base)
        got = lp.detach().float()
        if impl == "naive":
            ref = got
        out[impl] = {"ms": round(1000 * min(times[1:]), 2), "peak_memory_mb": peak,
                     "max_abs_diff_vs_naive": float((got - ref).abs().max())}
        del h, w, lp, ent
    log(f"bench gpu: log-prob kernel: {json.dumps({k: out[k] for k in impls})}")
    return out


def _sampled_logprobs(logits, tokens):
    import torch

    return torch.log_softmax(logits.float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _generate(model, prompt, new: int, seed: int):
    """(sequences, the sampled tokens' log-probs from the generation's raw logits): plain sampling, temperature 1,
    no top-k / top-p (the distribution rtrl's training traffic is sampled from)."""
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True, temperature=1.0, top_k=0,
                             top_p=1.0, max_new_tokens=new, min_new_tokens=new, output_logits=True,
                             return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    seq = out.sequences
    logits = torch.stack(out.logits, 1)                    # [B, new, V]
    return seq, _sampled_logprobs(logits, seq[:, prompt.shape[1]:])


def _recompute(model, seq, prompt_len: int, impl: str):
    """The trainer's log-probs of the completion tokens of `seq` (decoder, head fused with the log-probs)."""
    import torch

    from trainer.logprobs import linear_token_logprobs

    with torch.no_grad():
        hidden = model.get_decoder()(input_ids=seq).last_hidden_state[:, prompt_len - 1:-1]
        tokens = seq[:, prompt_len:]
        lp, _ = linear_token_logprobs(hidden.reshape(-1, hidden.shape[-1]), model.get_output_embeddings().weight,
                                      tokens.reshape(-1), impl=impl)
    return lp.reshape(tokens.shape)


def _diff(a, b) -> dict:
    d = (a.float() - b.float()).abs()
    return {"mean_abs": float(d.mean()), "max_abs": float(d.max())}


def _match(cfg, shape: dict, device, seed: int, folder: Path, log) -> dict:
    """Generation vs recomputation log-probs; saves the bf16 model to `folder` (checkpoint timing and vLLM)."""
    import torch

    impl = "triton" if device.type == "cuda" else "chunked"
    g = torch.Generator(device="cpu").manual_seed(seed)
    prompt = torch.randint(1, cfg.vocab_size, (shape["gen_batch"], shape["prompt"]), generator=g).to(device)
    p = shape["prompt"]
    m32 = _model(cfg, device, torch.float32, seed).eval()
    seq32, gen32 = _generate(m32, prompt, shape["new"], seed)
    fp32_ref = _recompute(m32, seq32, p, impl)
    m16 = _model(cfg, device, torch.float32, seed).to(torch.bfloat16).eval()   # the same weights, rounded
    seq16, gen16 = _generate(m16, prompt, shape["new"], seed)
    re16 = _recompute(m16, seq16, p, impl)
    re32_of16 = _recompute(m32, seq16, p, impl)
    out = {"sequences": shape["gen_batch"], "completion_tokens": shape["new"], "recompute_impl": impl,
           "fp32_generation_vs_fp32_recompute": _diff(gen32, fp32_ref),
           "bf16_generation_vs_bf16_recompute": _diff(gen16, re16),
           "bf16_generation_vs_fp32_recompute": _diff(gen16, re32_of16),
           "mean_logprob": float(gen16.float().mean())}
    log(f"bench gpu: log-prob match: {json.dumps(out)}")
    m16.save_pretrained(folder, safe_serialization=True)      # for the checkpoint timing and vLLM
    del m32, m16
    _reset_peak(device)
    return out, prompt.cpu(), seq16.cpu(), re32_of16.cpu()


def _checkpoint(cfg, device, seed: int, folder: Path, log) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    model = _model(cfg, device, torch.bfloat16, seed)
    again = folder.parent / "again"
    _sync(device)
    t0 = time.perf_counter()
    model.save_pretrained(again, safe_serialization=True)
    save_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = AutoModelForCausalLM.from_pretrained(again, dtype=torch.bfloat16, device_map={"": device})
    _sync(device)
    load_s = time.perf_counter() - t0
    a, b = model.state_dict(), loaded.state_dict()
    diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    size = sum(f.stat().st_size for f in again.glob("*.safetensors"))
    out = {"save_s": round(save_s, 3), "load_s": round(load_s, 3), "size_mb": round(size / 2**20, 1),
           "max_abs_diff_after_load": diff}
    log(f"bench gpu: checkpoint: {json.dumps(out)}")
    del model, loaded
    _reset_peak(device)
    return out


def _vllm(device, folder: Path, prompt, seq, fp32_ref, log):
    import importlib.util

    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "skipped: not installed"
    if device.type != "cuda":
        return "skipped: CPU dry run (vLLM is checked on GPUs)"
    import torch

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")   # the engine in this process (CUDA is initialized)
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    p = prompt.shape[1]
    t0 = time.perf_counter()
    llm = LLM(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16", gpu_memory_utilization=0.3,
              enforce_eager=True, max_model_len=p + seq.shape[1], seed=0)
    start_s = time.perf_counter() - t0
    # vLLM's log-probs of the tokens transformers sampled: score each sequence's prompt (prompt_logprobs)
    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=s.tolist()) for s in seq], params)
    got = []
    for s, o in zip(seq.tolist(), outs):
        got.append([o.prompt_logprobs[i][s[i]].logprob for i in range(p, len(s))])
    got = torch.tensor(got)
    out = {"engine_start_s": round(start_s, 1), "bf16_vllm_vs_fp32_recompute": _diff(got, fp32_ref)}
    log(f"bench gpu: vllm: {json.dumps(out)}")
    del llm
    return out


def run(args, cfg=None, log=print) -> tuple[dict, bool]:
    import torch

    t_start = time.perf_counter()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    size = args.size if args.size != "auto" else ("0.5b" if cuda else "toy")
    mcfg, shape = _model_config(size), SHAPES[size]
    seed = getattr(args, "seed", 0)
    n_params = sum(p.numel() for p in _model(mcfg, torch.device("meta"), torch.float32, seed).parameters())
    result: dict = {"device": device.type, "gpu": torch.cuda.get_device_name(0) if cuda else None,
                    "torch": torch.__version__, "size": size,
                    "model": {"architecture": "Qwen2ForCausalLM", "params_m": round(n_params / 1e6, 1),
                              "hidden": mcfg.hidden_size, "layers": mcfg.num_hidden_layers,
                              "vocab": mcfg.vocab_size},
                    "train_shape": {"batch": shape["batch"], "seq": shape["seq"], "steps": shape["steps"]}}
    log(f"bench gpu: {size} Qwen2 ({result['model']['params_m']}M params) on {device.type}")
    result["train"] = {m: _train(m, mcfg, shape, device, seed, log) for m in ("bf16", "bf16_checkpointing", "lora")}
    result["logprob_kernel"] = _kernel(mcfg, shape, device, seed, log)
    with tempfile.TemporaryDirectory(prefix="rtrl-bench-gpu-") as tmp:
        folder = Path(tmp) / "model"
        result["logprob_match"], prompt, seq, fp32_ref = _match(mcfg, shape, device, seed, folder, log)
        result["checkpoint"] = _checkpoint(mcfg, device, seed, folder, log)
        try:
            result["vllm"] = _vllm(device, folder, prompt, seq, fp32_ref, log)
        except Exception as e:  # noqa: BLE001 -- a vLLM failure is a finding, not the end of the check
            result["vllm"] = f"failed: {type(e).__name__}: {e}"[:500]
    result["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    trained = [t for t in result["train"].values() if "tokens_per_s" in t]
    ref = result["logprob_match"]["fp32_generation_vs_fp32_recompute"]
    ok = (all(t["tokens_per_s"] > 0 and t["loss_finite"] for t in trained) and math.isfinite(ref["max_abs"])
          and ref["max_abs"] < 1e-2 and result["checkpoint"]["max_abs_diff_after_load"] == 0.0
          and not str(result["vllm"]).startswith("failed"))
    return result, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.bench.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output too)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    import contextlib

    with contextlib.redirect_stdout(sys.stderr):
        result, ok = run(args, None, log)
    print(json.dumps({"benchmark": "gpu", "cpus": os.cpu_count(), **result}, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
