"""Reward rows -> padded micro-batches of (prompt + completion) sequences with the tensors the loss needs.

A causal LM's logits at position p predict token p + 1, so for a sequence prompt (P tokens) + completion (C tokens)
the completion token j sits at target position P + j - 1 of the shifted targets. Everything per token is laid out
on those shifted positions: `targets` [B, L-1], `mask` (1 on completion tokens), `behaviour_logp` (serving's
logged log-prob of each completion token).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import torch


@dataclass
class MicroBatch:
    input_ids: torch.Tensor        # [B, L] right-padded with pad_id
    attention_mask: torch.Tensor   # [B, L]
    targets: torch.Tensor          # [B, L-1] next tokens (pad positions hold 0)
    mask: torch.Tensor             # [B, L-1] 1 where the target is a completion token
    behaviour_logp: torch.Tensor   # [B, L-1] serving's log-probs on completion positions, 0 elsewhere
    rewards: torch.Tensor          # [B]
    advantages: torch.Tensor       # [B]
    request_ids: list[str]

    def to(self, device) -> "MicroBatch":
        move = {k: v.to(device) for k, v in self.__dict__.items() if isinstance(v, torch.Tensor)}
        return MicroBatch(**{**self.__dict__, **move})

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def build_micro_batch(rows: pl.DataFrame, advantages: torch.Tensor, pad_id: int) -> MicroBatch:
    prompts = rows["prompt_token_ids"].to_list()
    completions = rows["completion_token_ids"].to_list()
    behaviour = rows["behaviour_logprobs"].to_list()
    length = max(len(p) + len(c) for p, c in zip(prompts, completions))
    b = len(prompts)
    input_ids = torch.full((b, length), pad_id, dtype=torch.long)
    attention = torch.zeros((b, length), dtype=torch.long)
    mask = torch.zeros((b, length - 1), dtype=torch.long)
    beh = torch.zeros((b, length - 1), dtype=torch.float32)
    for i, (p, c, lp) in enumerate(zip(prompts, completions, behaviour)):
        if len(lp) != len(c):
            raise ValueError(f"row {rows['request_id'][i]}: {len(lp)} behaviour log-probs for {len(c)} tokens")
        n = len(p) + len(c)
        input_ids[i, :n] = torch.tensor(p + c, dtype=torch.long)
        attention[i, :n] = 1
        start = len(p) - 1
        mask[i, start:start + len(c)] = 1
        beh[i, start:start + len(c)] = torch.tensor(lp, dtype=torch.float32)
    targets = input_ids[:, 1:].clone()
    targets[mask == 0] = 0
    return MicroBatch(input_ids, attention, targets, mask, beh, torch.tensor(rows["reward"].to_list()),
                      advantages, rows["request_id"].to_list())


@dataclass(frozen=True)
class Step:
    """One optimizer step: its rows [start, end) and the micro-batches, (start, end) row ranges, that are run.
    `micro` covers every row of the step, or only its leading rows that carry gradient (`steps(active=...)`)."""

    start: int
    end: int
    micro: list[tuple[int, int]]

    @property
    def rows(self) -> int:
        return self.end - self.start


def steps(n_rows: int, rows_per_step: int, micro_batch: int, active: list[int] | None = None) -> list[Step]:
    """The run's plan: one pass, an optimizer step per `rows_per_step` rows. With `active` (per step, how many of
    its leading rows carry gradient) the micro-batches cover only those; a step with none keeps one micro-batch
    (run with weight 0) so that the optimizer still steps."""
    plan = []
    for k, s in enumerate(range(0, n_rows, rows_per_step)):
        end = min(s + rows_per_step, n_rows)
        upto = end if active is None else s + active[k]
        micro = [(m, min(m + micro_batch, upto)) for m in range(s, upto, micro_batch)]
        plan.append(Step(s, end, micro or [(s, min(s + micro_batch, end))]))
    return plan
