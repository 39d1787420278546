"""Supervised fine-tuning on demonstrations, in plain torch (the RL trainer, docs/trainer.md, is a separate module).

Loss: token-level cross-entropy on completion tokens only (the prompt and padding carry no loss), averaged over
the completion tokens of the batch. AdamW, linear warmup then cosine decay to `min_lr_ratio` of the peak, gradient
clipping. Batches hold examples of similar length (sorted into length buckets, then the batches are shuffled),
so little compute goes to padding. Seeded and deterministic: the same seed, data and thread count give the same
weights.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

IGNORE = -100  # label of a token that carries no loss


@dataclass(frozen=True)
class Encoded:
    ids: list[int]       # prompt + completion token ids
    n_prompt: int        # how many of them are the prompt


@dataclass
class SftResult:
    steps: int
    examples_seen: int
    completion_tokens: int
    first_loss: float
    final_loss: float            # mean of the last `log_every` steps
    seconds: float
    log: list[dict] = field(default_factory=list)


def encode(tokenizer, examples: Sequence, max_len: int) -> tuple[list[Encoded], int]:
    """Token ids of (prompt, completion) pairs; examples longer than `max_len` are dropped. -> (encoded, dropped)."""
    out, dropped = [], 0
    prompts = tokenizer([e.prompt for e in examples], add_special_tokens=False)["input_ids"]
    completions = tokenizer([e.completion for e in examples], add_special_tokens=False)["input_ids"]
    for p, c in zip(prompts, completions):
        if len(p) + len(c) > max_len:
            dropped += 1
            continue
        out.append(Encoded(list(p) + list(c), len(p)))
    return out, dropped


def length_batches(data: Sequence[Encoded], batch_size: int, rng: random.Random) -> list[list[int]]:
    """One epoch of batches (indices) of similar length, in random order."""
    order = sorted(range(len(data)), key=lambda i: (len(data[i].ids), rng.random()))
    batches = [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(data: Sequence[Encoded], idx: Sequence[int], pad_id: int):
    """Right-padded input ids, attention mask, and labels with IGNORE on prompt and padding positions."""
    import torch

    width = max(len(data[i].ids) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(idx), width), dtype=torch.long)
    labels = torch.full((len(idx), width), IGNORE, dtype=torch.long)
    for row, i in enumerate(idx):
        ex = data[i]
        n = len(ex.ids)
        ids[row, :n] = torch.tensor(ex.ids)
        mask[row, :n] = 1
        labels[row, ex.n_prompt:n] = torch.tensor(ex.ids[ex.n_prompt:])
    return ids, mask, labels


def completion_loss(logits, labels):
    """Mean next-token cross-entropy over positions whose label is not IGNORE: (loss, number of such tokens)."""
    import torch.nn.functional as F

    target = labels[:, 1:]
    pred = logits[:, :-1].float()
    n = int((target != IGNORE).sum())
    loss = F.cross_entropy(pred.reshape(-1, pred.shape[-1]), target.reshape(-1), ignore_index=IGNORE,
                           reduction="sum")
    return loss / max(n, 1), n


def lr_at(step: int, steps: int, warmup: int, min_ratio: float) -> float:
    """Multiplier of the peak learning rate at `step` (0-based): linear warmup, then cosine to `min_ratio`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def train(model, data: Sequence[Encoded], *, steps: int, batch_size: int, lr: float, warmup_steps: int,
          min_lr_ratio: float, weight_decay: float, grad_clip: float, seed: int, pad_id: int,
          log_every: int = 10, log: Callable[[str], None] = print,
          stop: Callable[[int], bool] | None = None) -> SftResult:
    """Up to `steps` optimizer steps over `data` (epochs reshuffled when it runs out), the model trained in place;
    `stop(step)`, called after each step, ends training early by returning True (the schedule spans `steps`)."""
    import torch

    if not data:
        raise ValueError("no training examples")
    torch.manual_seed(seed)
    rng = random.Random(f"sft:{seed}")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95), eps=1e-8)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, steps, warmup_steps, min_lr_ratio))
    model.train()
    t0, batches, seen, tokens, losses, records = time.monotonic(), [], 0, 0, [], []
    for step in range(steps):
        if not batches:
            batches = length_batches(data, batch_size, rng)
        idx = batches.pop()
        ids, mask, labels = collate(data, idx, pad_id)
        logits = model(input_ids=ids, attention_mask=mask).logits
        loss, n = completion_loss(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
        opt.step()
        sched.step()
        seen, tokens = seen + len(idx), tokens + n
        losses.append(loss.item())
        done = step + 1 == steps or (stop is not None and stop(step + 1))
        if (step + 1) % log_every == 0 or done:
            rec = {"step": step + 1, "loss": round(sum(losses[-log_every:]) / len(losses[-log_every:]), 4),
                   "lr": round(sched.get_last_lr()[0], 6), "grad_norm": round(grad_norm, 3),
                   "elapsed_s": round(time.monotonic() - t0, 1)}
            records.append(rec)
            log(f"sft step {rec['step']}/{steps} loss {rec['loss']:.4f} lr {rec['lr']:.2e} "
                f"grad_norm {rec['grad_norm']:.2f} elapsed {rec['elapsed_s']:.0f}s")
        if done:
            break
    model.eval()
    tail = losses[-log_every:]
    return SftResult(len(losses), seen, tokens, losses[0], sum(tail) / len(tail), time.monotonic() - t0, records)
