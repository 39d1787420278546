"""`rtrl bench trainer`: the trainer's throughput against TRL's GRPOTrainer, and the log-prob path's memory.

  tokens_per_s              our update (trainer.train.Trainer: DeepSpeed engine, head on completion positions,
                            chunked log-probs, rows bucketed by length) over the same rows, real tokens per second
  trl_grpo_tokens_per_s     TRL's GRPOTrainer loss step (compute_loss + backward + optimizer step every
                            `rows_per_step` rows, loss_type dr_grpo, beta 0) on the same initial weights, rows,
                            micro-batch size and sequence lengths (TRL pads prompts left, completions right)
  fused_logprob_peak_mb     peak memory of the sampled tokens' log-probs + entropy, forward and backward, from
                            4,096 final hidden states (1,024 wide) and a 32k-token output head, beyond those
                            inputs: `linear_token_logprobs` (chunked torch here; the Triton kernel per chunk on CUDA)
  naive_logprob_peak_mb     the same for logits = h W^T, log_softmax, gather
TRL is installed for this benchmark only (`pip install -e .[bench]`; the command installs it when missing).
"""

from __future__ import annotations

import importlib.util
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

TRL = "trl==1.16.0"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_logprob_peak(impl: str, n: int, vocab: int, hidden: int = 1024) -> float:
    """(Run in a fresh process.) MB of peak memory above the inputs (final hidden states [n, hidden] and the output
    head [vocab, hidden]) while computing the sampled tokens' log-probs + entropy and both gradients -- what the
    trainer does per micro-batch. naive: logits = h W^T, log_softmax, gather; fused: linear_token_logprobs."""
    import torch

    from trainer.logprobs import linear_token_logprobs, naive_token_logprobs

    torch.manual_seed(0)
    h = torch.randn(n, hidden, requires_grad=True)
    w = (torch.randn(vocab, hidden) * 0.02).requires_grad_(True)
    tokens = torch.randint(0, vocab, (n,))
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    base = _rss_kb("VmRSS")
    if impl == "naive":
        lp, ent = naive_token_logprobs(h @ w.t(), tokens)
    else:
        lp, ent = linear_token_logprobs(h, w, tokens, impl=impl)
    (lp.sum() + ent.sum()).backward()
    return (_rss_kb("VmHWM") - base) / 1024


def _logprob_peak_subprocess(impl: str, n: int, vocab: int) -> float:
    code = (f"import json; from infra.bench.trainer import measure_logprob_peak; "
            f"print(json.dumps(measure_logprob_peak({impl!r}, {n}, {vocab})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).parents[2])
    if out.returncode != 0:
        raise RuntimeError(f"log-prob memory probe ({impl}) failed: {out.stderr[-2000:]}")
    return round(float(out.stdout.strip().splitlines()[-1]), 1)


def _ensure_trl(log) -> None:
    if importlib.util.find_spec("trl") is None:
        log(f"bench: installing {TRL} (for this benchmark only)")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", TRL], check=True)


def _model_and_rows(folder: Path, n_rows: int, vocab: int, seed: int):
    import polars as pl
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=688,
                                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                                         max_position_embeddings=1024, pad_token_id=0, eos_token_id=1))
    model.save_pretrained(folder, safe_serialization=True)
    words = {"<pad>": 0, "<|end|>": 1, **{f"w{i}": i for i in range(2, vocab)}}
    tk = Tokenizer(models.WordLevel(words, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<|end|>")
    tok.save_pretrained(folder)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n_rows):
        p = int(torch.randint(48, 321, (1,), generator=g))
        c = int(torch.randint(8, 161, (1,), generator=g))
        rows.append({"request_id": f"r{i:05d}", "prompt_token_ids": torch.randint(2, vocab, (p,), generator=g).tolist(),
                     "completion_token_ids": torch.randint(2, vocab, (c,), generator=g).tolist(),
                     "behaviour_logprobs": (-torch.rand(c, generator=g) * 8).tolist(),
                     "reward": float(torch.randn(1, generator=g)), "response_kind": "edit"})
    return pl.DataFrame(rows), tok


def _ours(folder: Path, rows, micro: int, per_step: int, run_dir: Path, skip_inert: bool = False) -> tuple[float, int]:
    """(seconds, rows skipped). By default every row runs forward and backward, the work TRL's loss step does;
    `skip_inert` is the trainer's default, which leaves out the rows whose loss term is zero."""
    from trainer.config import TrainerConfig
    from trainer.train import Trainer

    t = Trainer(TrainerConfig(micro_batch=micro, rows_per_step=per_step, max_tokens=160, min_rows=1,
                              checkpoint_every=10**6, skip_inert_rows=skip_inert), rows, folder, run_dir)
    t.setup()
    t0 = time.perf_counter()
    try:
        t.train()
        return time.perf_counter() - t0, t.summary.inert_rows
    finally:
        t.close()


def _trl(folder: Path, rows, tok, micro: int, per_step: int, out: Path) -> float:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=micro,
                      gradient_accumulation_steps=per_step // micro, num_generations=micro, beta=0.0,
                      loss_type="dr_grpo", use_cpu=True, report_to=[], max_completion_length=160,
                      logging_steps=10**6, save_strategy="no", learning_rate=2e-5,
                      # like ours: float32, no activation recomputation (TRL's CPU defaults, bf16 autocast and
                      # gradient checkpointing, made it ~4x slower still; not a fair comparison)
                      bf16=False, fp16=False, gradient_checkpointing=False)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["w2"] * micro}), processing_class=tok)
    trainer.current_gradient_accumulation_steps = per_step // micro
    model = trainer.model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    prompts, completions = rows["prompt_token_ids"].to_list(), rows["completion_token_ids"].to_list()
    rewards = torch.tensor(rows["reward"].to_list())
    t0 = time.perf_counter()
    for s in range(0, rows.height, per_step):
        for m in range(s, min(s + per_step, rows.height), micro):
            ps, cs = prompts[m:m + micro], completions[m:m + micro]
            lp, lc = max(map(len, ps)), max(map(len, cs))
            pids = torch.zeros(len(ps), lp, dtype=torch.long)
            pmask = torch.zeros_like(pids)
            cids = torch.zeros(len(cs), lc, dtype=torch.long)
            cmask = torch.zeros_like(cids)
            for i, (p, c) in enumerate(zip(ps, cs)):
                pids[i, lp - len(p):], pmask[i, lp - len(p):] = torch.tensor(p), 1
                cids[i, :len(c)], cmask[i, :len(c)] = torch.tensor(c), 1
            adv = rewards[m:m + micro] - rewards[m:m + micro].mean()
            loss = trainer.compute_loss(model, {"prompt_ids": pids, "prompt_mask": pmask, "completion_ids": cids,
                                                "completion_mask": cmask, "advantages": adv})
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    return time.perf_counter() - t0


def run(n_rows: int = 256, micro: int = 8, per_step: int = 64, vocab: int = 8192, logprob_tokens: int = 4096,
        log: Callable[[str], None] = print) -> dict:
    _ensure_trl(log)
    tmp = Path(tempfile.mkdtemp(prefix="rtrl-bench-trainer-"))
    rows, tok = _model_and_rows(tmp / "model", n_rows, vocab, seed=0)
    tokens = int((rows["prompt_token_ids"].list.len() + rows["completion_token_ids"].list.len()).sum())
    log(f"bench: {n_rows} rows, {tokens} tokens; our trainer")
    t_ours, _ = _ours(tmp / "model", rows, micro, per_step, tmp / "ours")
    log(f"bench: ours {t_ours:.1f}s; ours skipping the rows whose loss term is zero (the default)")
    t_skip, inert = _ours(tmp / "model", rows, micro, per_step, tmp / "ours-skip", skip_inert=True)
    log(f"bench: ours, skipping {inert} rows, {t_skip:.1f}s; TRL GRPOTrainer loss steps")
    t_trl = _trl(tmp / "model", rows, tok, micro, per_step, tmp / "trl")
    log(f"bench: TRL {t_trl:.1f}s; log-prob memory at vocabulary 32k")
    fused = _logprob_peak_subprocess("auto", logprob_tokens, 32000)
    naive = _logprob_peak_subprocess("naive", logprob_tokens, 32000)
    return {"rows": n_rows, "tokens": tokens, "micro_batch": micro, "rows_per_step": per_step, "vocab": vocab,
            "tokens_per_s": round(tokens / t_ours, 1), "trl_grpo_tokens_per_s": round(tokens / t_trl, 1),
            "speedup_vs_trl": round(t_trl / t_ours, 3), "inert_rows": inert,
            "speedup_skipping_inert_rows": round(t_ours / t_skip, 3), "logprob_tokens": logprob_tokens,
            "fused_logprob_peak_mb": fused, "naive_logprob_peak_mb": naive,
            "fused_vs_naive_memory": round(fused / naive, 3) if naive else None,
            "peak_rss_mb": round(_peak_rss_mb(), 1)}


if __name__ == "__main__":
    print(json.dumps(run()))
