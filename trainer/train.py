"""One cycle's on-policy update: selected reward rows + the champion checkpoint -> the candidate checkpoint.

    trainer = Trainer(cfg, rows, parent_dir, run_dir)
    trainer.setup()            # model, frozen parent (old/reference log-probs), advantages, plan, engine
    trainer.train()            # one pass; resumes from the last step checkpoint under run_dir (the only one kept)
    folder = trainer.save_checkpoint(metadata)   # HF folder + rtrl_metadata.json
    trainer.cleanup()          # once the folder is registered: the run folder goes (trainer/scratch.py)

Per micro-batch: the policy's log-probs (with gradient) and entropy of the completion tokens; the frozen parent's
log-probs (theta_old: the ratio's denominator and the truncated-IS numerator against serving's behaviour
log-probs; also the KL reference); `trainer.losses.policy_loss`; DeepSpeed accumulates until the step boundary.
Rows whose loss term is exactly zero (`skip_inert_rows`: advantage 0, no KL, constant aggregation) are not run:
at negative_weight 0 that is every below-baseline row, about two thirds of a cycle's rows.
Deterministic for a seed: fixed row order, no dropout, the same plan on resume.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import polars as pl
import torch

from trainer.config import TrainerConfig
from trainer.data import build_micro_batch, steps
from trainer.logprobs import linear_token_logprobs, token_logprobs
from trainer.losses import LossConfig, LossInputs, advantages, policy_loss
from trainer.scratch import STEPS, remove, stale_step_checkpoints


# decoder -> final norm -> lm_head with nothing after the head (no logit soft-capping or scaling)
HEAD_ON_HIDDEN = frozenset({"llama", "mistral", "qwen2", "qwen3"})


@dataclass
class StepMetrics:
    step: int
    rows: int
    tokens: int
    loss: float
    reward_mean: float
    advantage_mean: float
    advantage_std: float
    entropy: float
    grad_norm: float | None
    clipped_fraction: float
    tis_weight_mean: float
    mismatch: float
    kl: float
    seconds: float


@dataclass
class TrainSummary:
    steps: int = 0
    rows: int = 0
    tokens: int = 0
    inert_rows: int = 0          # rows left out of the forward/backward: their loss term is exactly zero
    frozen_parameters: list[str] = field(default_factory=list)   # kept at the parent's values (`frozen`)
    resumed_from_step: int = 0
    seconds: float = 0.0
    history: list[StepMetrics] = field(default_factory=list)


def freeze(model: torch.nn.Module, patterns: list[str]) -> list[str]:
    """Stop the gradient of every parameter whose name matches one of `patterns` (fnmatch); returns the names
    frozen. Tied tensors are one parameter: naming either of its names (embedding or LM head) freezes it."""
    named = list(model.named_parameters(remove_duplicate=False))
    matched = {pattern: {id(p) for n, p in named if fnmatch.fnmatchcase(n, pattern)} for pattern in patterns}
    for pattern, ids in matched.items():
        if not ids:
            raise ValueError(f"trainer.frozen: {pattern!r} names no parameter of the model "
                             f"(they are named like {named[0][0]!r})")
    hit = set().union(*matched.values())
    frozen = []
    for name, p in model.named_parameters():      # each tensor once, under its first name
        if id(p) in hit:
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def negative_kind_of(rows: pl.DataFrame, kinds: list[str]) -> list[str]:
    """Each row's kind for `trainer.negative_kinds`: "broken" when that is listed and the response has a broken
    tool call, else its response_kind."""
    broken = ((rows["broken_tool_calls"] > 0).to_list() if "broken" in kinds
              else [False] * rows.height)
    return ["broken" if b else k for b, k in zip(broken, rows["response_kind"].to_list())]


def _prompt_key(ids: list[int]) -> str:
    return hashlib.blake2b(json.dumps(ids).encode(), digest_size=12).hexdigest()


def prompt_groups(rows: pl.DataFrame) -> list[str]:
    """Each row's prompt group for the group-mean baseline: its request's `group_id`, else its prompt's token ids.
    A group_id says what serving knows: these samples were drawn together for one request (n > 1) and share
    everything but the sample. Two requests with group_ids are two groups even when their prompts are the
    same tokens (another user, another moment, another outcome). Rows without a group_id (single samples, tables
    written before reward rows had one) group by prompt as before, in a key space of their own."""
    ids = rows["group_id"].to_list() if "group_id" in rows.columns else [None] * rows.height
    return [f"request:{g}" if g is not None else f"prompt:{_prompt_key(p)}"
            for g, p in zip(ids, rows["prompt_token_ids"].to_list())]


class Trainer:
    def __init__(self, cfg: TrainerConfig, rows: pl.DataFrame, parent_dir: str | Path, run_dir: str | Path,
                 on_step: Callable[[StepMetrics], None] | None = None, base_dir: str | Path | None = None):
        self.cfg, self.rows = cfg, rows.sort("request_id")
        self.parent_dir, self.run_dir = Path(parent_dir), Path(run_dir)
        self.base_dir = None if base_dir is None else Path(base_dir)   # a LoRA-adapter parent's full base
        self.on_step = on_step or (lambda m: None)
        self.summary = TrainSummary(rows=rows.height)

    # -- setup -------------------------------------------------------------------------------------------------
    def setup(self) -> None:
        from transformers import AutoTokenizer

        from trainer.adapters import is_peft, load_policy
        from trainer.engine import Engine, set_rank_device
        from trainer.modes import DTYPES, enable_checkpointing

        set_rank_device()    # this rank's GPU before any copy of the model lands on one
        if self.cfg.threads:
            torch.set_num_threads(self.cfg.threads)
        torch.manual_seed(self.cfg.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(self.parent_dir)
        model = load_policy(self.parent_dir, self.base_dir, self.cfg)   # float32; full, or a LoRA adapter's
        self.summary.frozen_parameters = freeze(model, self.cfg.frozen)
        # 16-bit training casts every parameter: keep the exact values of the ones saved but not trained
        self._keep = ({n: p.detach().clone() for n, p in model.named_parameters(remove_duplicate=False)
                       if not p.requires_grad} if self.cfg.precision != "fp32" and not is_peft(model) else {})
        self.parent = None  # the frozen parent: theta_old in "parent" mode, and the KL reference
        if self.cfg.old_logprobs == "parent" or self.cfg.kl_coef > 0:   # in the policy's compute dtype
            self.parent = copy.deepcopy(model).eval().requires_grad_(False).to(DTYPES[self.cfg.precision])
        if self.cfg.gradient_checkpointing:
            enable_checkpointing(model)
        groups = prompt_groups(self.rows)
        by = self.cfg.stratify_by
        if by and by not in self.rows.columns:
            raise ValueError(f"trainer.stratify_by: the reward table has no column {by!r}")
        strata = [str(v) for v in self.rows[by].to_list()] if by else None
        # negative_weight scales whole rows, or with negative_tokens only the tokens past the first N (in the loss)
        row_weight, token_weight = ((1.0, self.cfg.negative_weight) if self.cfg.negative_tokens
                                    else (self.cfg.negative_weight, 1.0))
        if self.cfg.negative_kinds:   # these kinds' below-baseline rows push down in full
            row_weight = torch.tensor([1.0 if kind in self.cfg.negative_kinds else row_weight
                                       for kind in negative_kind_of(self.rows, self.cfg.negative_kinds)],
                                      dtype=torch.float64)
        self.adv = advantages(torch.tensor(self.rows["reward"].to_list(), dtype=torch.float32), groups, strata,
                              self.cfg.normalize_std, negative_weight=row_weight).values
        inert = self._inert()
        active = self._order_within_steps(inert)
        self.summary.inert_rows = int(inert.sum())
        self.plan = steps(self.rows.height, self.cfg.rows_per_step, self.cfg.micro_batch, active)
        accumulation = max(len(s.micro) for s in self.plan) if self.plan else 1
        self.engine = Engine(model, self.cfg.lr, self.cfg.weight_decay, self.cfg.max_grad_norm, self.cfg.zero_stage,
                             self.cfg.micro_batch, accumulation, precision=self.cfg.precision)
        if self.parent is not None:   # on this rank's device, where the engine put the policy
            self.parent = self.parent.to(self.engine.device)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.tokenizer.eos_token_id or 0)
        self.loss_cfg = LossConfig(self.cfg.loss, self.cfg.clip_low, self.cfg.clip_high, self.cfg.tis_cap,
                                   self.cfg.kl_coef, self.cfg.kl_estimator, self.cfg.aggregation,
                                   negative_tokens=self.cfg.negative_tokens, negative_weight=token_weight)

    def _inert(self) -> torch.Tensor:
        """Rows whose loss term is exactly zero, whatever the policy: advantage 0 (every below-baseline row at
        negative_weight 0 without negative_tokens), no KL term, and the constant aggregation (whose normalizer does
        not depend on which rows run). With `skip_inert_rows` they are left out of the forward/backward (all False
        otherwise)."""
        if not self.cfg.skip_inert_rows or self.cfg.kl_coef > 0 or self.cfg.aggregation != "constant":
            return torch.zeros(self.rows.height, dtype=torch.bool)
        return self.adv == 0

    def _order_within_steps(self, inert: torch.Tensor) -> list[int]:
        """Within each optimizer step: the rows that carry gradient first, each part by length, so micro-batches
        pad little. The rows of a step (and so its gradient sum) do not change, only which micro-batch carries
        which row. Returns, per step, how many rows carry gradient."""
        lengths = (self.rows["prompt_token_ids"].list.len() + self.rows["completion_token_ids"].list.len()).to_list()
        flags = inert.tolist()
        order: list[int] = []
        active: list[int] = []
        for s in range(0, self.rows.height, self.cfg.rows_per_step):
            rows = range(s, min(s + self.cfg.rows_per_step, self.rows.height))
            order += sorted(rows, key=lambda i: (flags[i], lengths[i], i))
            active.append(sum(not flags[i] for i in rows))
        self.rows = self.rows[order]
        self.adv = self.adv[torch.tensor(order, dtype=torch.long)] if order else self.adv
        return active

    # -- train -------------------------------------------------------------------------------------------------
    def _logprobs(self, model, mb, grad: bool):
        """Log-probs and entropy of the completion tokens, [B, L-1] (0 off the mask). For decoder + lm_head
        models (Llama family) the head runs only on completion positions, in chunks fused with the log-probs
        (`linear_token_logprobs`): prompt and padding positions never get logits, and the completion logits never
        exist whole. Other models: their full logits, then the chosen log-prob path."""
        with torch.set_grad_enabled(grad):
            keep = mb.mask.bool()
            head = model.get_output_embeddings()
            if (model.config.model_type in HEAD_ON_HIDDEN and head.bias is None and self.cfg.zero_stage < 3
                    and self.cfg.logprob_impl != "naive"):
                hidden = model.get_decoder()(input_ids=mb.input_ids, attention_mask=mb.attention_mask)
                lp, ent = linear_token_logprobs(hidden.last_hidden_state[:, :-1][keep], head.weight, mb.targets[keep],
                                                impl=self.cfg.logprob_impl)
            else:
                logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1][keep]
                lp, ent = token_logprobs(logits, mb.targets[keep], impl=self.cfg.logprob_impl)
            full_lp = torch.zeros(mb.mask.shape, dtype=lp.dtype, device=lp.device).masked_scatter(keep, lp)
            full_ent = torch.zeros(mb.mask.shape, dtype=ent.dtype, device=ent.device).masked_scatter(keep, ent)
            return full_lp, full_ent

    def _micro_step(self, start: int, end: int, rows_in_step: int, boundary: bool, weight: float = 1.0):
        mb = build_micro_batch(self.rows.slice(start, end - start), self.adv[start:end], self.pad_id)
        mb = mb.to(self.engine.device)
        logp, entropy = self._logprobs(self.engine.module, mb, grad=True)
        parent_logp = None
        if self.parent is not None:
            parent_logp, _ = self._logprobs(self.parent, mb, grad=False)
        old = parent_logp if self.cfg.old_logprobs == "parent" else logp.detach()
        cfg = copy.copy(self.loss_cfg)
        cfg.constant = float(self.cfg.max_tokens * rows_in_step)
        out = policy_loss(LossInputs(logp, old, mb.behaviour_logp, mb.advantages, mb.mask,
                                     ref_logp=parent_logp if self.cfg.kl_coef > 0 else None), cfg)
        grad_norm = self.engine.backward(out.loss * weight, boundary)
        m = mb.mask.float()
        return out, float((entropy.detach() * m).sum()), mb, grad_norm

    def _checkpoint_dir(self) -> Path:
        return self.run_dir / STEPS

    def _save_step(self, step: int) -> None:
        """A resumable checkpoint after optimizer step `step`; then the ones before it are removed (only the newest is
        kept: a run resumes from it alone)."""
        self.engine.save(self._checkpoint_dir(), f"step{step}", {"step": step})
        if self.engine.local_rank == 0:
            remove(stale_step_checkpoints(self._checkpoint_dir()))

    def train(self) -> TrainSummary:
        t0 = time.perf_counter()
        state = self.engine.load(self._checkpoint_dir())
        done = int(state["step"]) if state else 0
        self.summary.resumed_from_step = done
        for index, step in enumerate(self.plan):
            if index < done:
                continue
            t_step = time.perf_counter()
            rows_in_step = step.rows
            acc = {"loss": 0.0, "tokens": 0, "entropy": 0.0, "clip": 0.0, "tis": 0.0, "mismatch": 0.0, "kl": 0.0}
            grad_norm = None
            rank, world = self.engine.rank, self.engine.world_size
            mine = step.micro[rank::world]
            # data parallel: each rank takes every world-th micro-batch; DeepSpeed averages gradients over ranks,
            # so losses are scaled by the world size to keep the step's sum / constant. A rank without a
            # micro-batch still joins the all-reduce with a zero-weighted one.
            share = [(mb, world) for mb in mine] or [(step.micro[0], 0.0)]
            for k, ((start, end), weight) in enumerate(share):
                out, ent_sum, mb, norm = self._micro_step(start, end, rows_in_step, boundary=k == len(share) - 1,
                                                          weight=weight)
                grad_norm = norm if norm is not None else grad_norm
                if not weight:       # the stand-in micro-batch of a rank without one: not part of the step
                    continue
                acc["loss"] += float(out.loss.detach())
                acc["tokens"] += out.tokens
                acc["entropy"] += ent_sum
                for key, value in (("clip", out.clipped_fraction), ("tis", out.tis_weight_mean),
                                   ("mismatch", out.mismatch), ("kl", float(out.kl))):
                    acc[key] += value * out.tokens
            if world > 1:        # the step's metrics over every rank's micro-batches
                acc = dict(zip(acc, self.engine.all_reduce_sum(list(acc.values()))))
                acc["tokens"] = int(acc["tokens"])
            tokens = max(acc["tokens"], 1)
            adv = self.adv[step.start:step.end]
            rewards = self.rows["reward"][step.start:step.end]
            metrics = StepMetrics(index + 1, rows_in_step, acc["tokens"], acc["loss"], float(rewards.mean()),
                                  float(adv.mean()), float(adv.std(unbiased=False)), acc["entropy"] / tokens,
                                  grad_norm, acc["clip"] / tokens, acc["tis"] / tokens, acc["mismatch"] / tokens,
                                  acc["kl"] / tokens, time.perf_counter() - t_step)
            if (index + 1) % self.cfg.checkpoint_every == 0 and index + 1 < len(self.plan):
                self._save_step(index + 1)
            self.summary.history.append(metrics)
            self.summary.tokens += acc["tokens"]
            self.on_step(metrics)
        self.summary.steps = len(self.plan)
        self.summary.seconds = time.perf_counter() - t0
        return self.summary

    # -- outputs -----------------------------------------------------------------------------------------------
    def save_checkpoint(self, metadata: dict) -> Path:
        """The trained policy as a Hugging Face folder (safetensors, tokenizer, config), or a peft LoRA adapter
        folder, + rtrl_metadata.json. Every rank calls it: 16-bit precision saves the float32 master weights and
        ZeRO-3 the whole weights, both gathered from every rank; rank 0 alone writes the folder."""
        from trainer.adapters import is_peft, save_weights
        from trainer.modes import master_state_dict

        folder = self.run_dir / "checkpoint"
        module = self.engine.module
        state = (master_state_dict(module, trainable_only=is_peft(module), keep=self._keep)
                 if self.cfg.precision != "fp32" else self.engine.state_dict_for_save())   # None: the module's own
        if self.engine.rank != 0:
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        save_weights(module, folder, state, base_uri=str(metadata.get("lora_base_uri", "")))
        self.tokenizer.save_pretrained(folder)
        for name in ("generation_config.json",):
            src = self.parent_dir / name
            if src.is_file() and not (folder / name).is_file():
                (folder / name).write_bytes(src.read_bytes())
        (folder / "rtrl_metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True, default=str))
        return folder

    def close(self) -> None:
        """Release the engine and the models (`Engine.close`); the trainer cannot train or save after it."""
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()
        self.engine = None
        self.parent = None

    def cleanup(self) -> None:
        """Remove the run folder: its step checkpoint and the candidate's folder. Call it once the candidate is
        registered (the registry holds it from then on)."""
        remove([self.run_dir])
