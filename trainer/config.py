"""`[trainer]`: the on-policy update of one cycle (data selection, loss, DeepSpeed engine, logging)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NEGATIVE_KINDS = ("edit", "question", "answer", "broken")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # data selection (trainer/selection.py)
    staleness: int = Field(default=1, ge=0, le=8, description="Rows served by the champion's ancestors this far "
                           "back are usable (importance-corrected); 0 = the champion's own rows only.")
    min_rows: int = Field(default=64, ge=1, description="Refuse to train on fewer usable reward rows.")
    max_rows: int = Field(default=0, ge=0, description="Train on at most this many usable rows per run (on-policy "
                          "first, a seeded random sample); 0 = all. Bounds a cycle's training time when traffic "
                          "outgrows it.")
    train_on_cut_short: bool = Field(default=False, description="Train on rows whose client left the stream before "
                                     "the answer ended (cut_short) instead of dropping them (dropped_cut_short). Off "
                                     "by default: the client, not the policy, ended such a sequence, so its tokens do "
                                     "not end where the policy would have. A cut-short row without a completion "
                                     "token is dropped either way.")
    # long loops (trainer/outcomes.py): background tasks' requests train once their task's outcome row is out
    outcome_weight: float = Field(default=1.0, ge=0, le=10, description="A background task's request trains on "
                                  "its reward plus this times its task's outcome reward (r_outcome), shared by the "
                                  "whole chain of the task; 0 trains it on its own reward alone (still when its "
                                  "outcome row comes out).")
    outcome_staleness: int = Field(default=2, ge=0, le=8, description="Ancestors back that a chain's requests may "
                                   "come from: a task's outcome arrives hours after its requests, so they are "
                                   "usually a version or two older than the champion (importance-corrected like "
                                   "other stale rows).")
    # batch: one pass over the selected rows, one optimizer step per `rows_per_step` rows
    micro_batch: int = Field(default=8, ge=1, le=4096, description="Sequences per forward/backward.")
    rows_per_step: int = Field(default=256, ge=1, description="Effective batch: rows per optimizer step "
                                                               "(gradient accumulation over micro-batches).")
    max_tokens: int = Field(default=192, ge=1, le=65536,
                            description="Completion tokens per row in the constant normalizer (Dr. GRPO).")
    # optimizer
    lr: float = Field(default=2e-4, gt=0, le=1, description="Peak learning rate. 2e-4 suits the default 2M-parameter "
                      "policy at 256 rows per step; billion-parameter models want ~1e-6.")
    weight_decay: float = Field(default=0.0, ge=0, le=1, description="AdamW weight decay.")
    max_grad_norm: float = Field(default=1.0, gt=0, description="The gradient is clipped to this global norm before "
                                 "each optimizer step.")
    zero_stage: int = Field(default=1, ge=0, le=3, description="DeepSpeed ZeRO stage.")
    seed: int = Field(default=0, ge=0, description="Seeds the row sample (max_rows) and torch's "
                      "generator (new LoRA weights, dropout).")
    frozen: list[str] = Field(default_factory=list, description="Parameter-name patterns (fnmatch) kept at the "
                              "parent's values, e.g. [\"model.embed_tokens.*\"]. A tied LM head is the embedding's "
                              "tensor, so it stays too. A pattern that names no parameter is an error. [] = train all.")
    # loss (trainer/losses.py)
    loss: str = Field(default="pg_clip", description="pg_clip | pg")
    clip_low: float = Field(default=0.2, ge=0, le=1, description="pg_clip: the per-token ratio is clipped below at "
                            "1 - clip_low (trainer/losses.py).")
    clip_high: float = Field(default=0.28, ge=0, le=10, description="pg_clip: ... and above at 1 + clip_high "
                             "(wider than clip_low: DAPO's clip-higher).")
    tis_cap: float = Field(default=2.0, ge=1, le=100, description="Truncated importance-sampling cap.")
    kl_coef: float = Field(default=0.0, ge=0, le=10, description="KL to the parent checkpoint; 0 = no penalty.")
    kl_estimator: str = Field(default="k1", pattern="^(k1|k3)$", description="k1 | k3: the per-token estimator of "
                              "the KL term (kl_coef > 0): k1 = logp - ref_logp, k3 = (r - 1) - log r (unbiased, >= 0).")
    aggregation: str = Field(default="constant", pattern="^(constant|token_mean|seq_mean)$",
                             description="constant | token_mean | seq_mean: how per-token terms become the loss. "
                                         "constant = their sum / (the step's rows x max_tokens), every token "
                                         "weighing the same whatever the response's length (Dr. GRPO); token_mean "
                                         "= per token of the batch (DAPO); seq_mean = per response, then over "
                                         "responses (the original GRPO: length-biased).")
    normalize_std: bool = Field(default=False, description="Divide advantages by the group/stratum std.")
    negative_weight: float = Field(default=0.0, ge=0, le=1,
                                   description="Scale of negative advantages (asymmetric REINFORCE): 1 = symmetric, "
                                               "0 = only above-baseline rows push. Pushing down a whole failed "
                                               "completion also pushes down its well-formed tokens, which can drift a "
                                               "small policy toward malformed tool calls.")
    negative_tokens: int = Field(default=0, ge=0, le=100_000,
                                 description="Below-baseline rows push down their first N completion tokens with the "
                                             "full negative advantage (negative_weight applies to the rest): the "
                                             "ask-or-edit decision learns from failures, while the tokens whose "
                                             "push-down can drift the policy to malformed calls do not. 0 = off.")
    negative_kinds: list[str] = Field(default_factory=list, description="Response kinds (the reward table's "
                                      "response_kind: edit, question, answer) whose below-baseline rows push down "
                                      "with the full negative advantage whatever negative_weight says, and "
                                      "\"broken\" for every response with a broken tool call (malformed, invalid, "
                                      "or an edit whose old text is not in the file): such a response is wrong as a "
                                      "whole, so pushing it down teaches the well-formed alternative, while wrong "
                                      "but well-formed edits stay at negative_weight. [] = off.")
    stratify_by: str = Field(default="", description="Reward-table column whose values are the leave-one-out "
                             "strata (e.g. org_id); '' = one stratum. Never the response's own kind: that would "
                             "cancel the signal between an edit and a needless answer.")
    old_logprobs: str = Field(default="current", pattern="^(current|parent)$",
                              description="theta_old of the ratio and the IS weight: the policy at the moment a row "
                                          "is used (one pass: each row once, no extra forward) or the frozen "
                                          "parent checkpoint (one more forward per micro-batch).")
    logprob_impl: str = Field(default="auto", pattern="^(auto|triton|chunked|naive)$",
                              description="auto | triton | chunked | naive: how the per-token log-probs and "
                                          "entropies are computed from the logits (trainer/logprobs.py); auto = the "
                                          "Triton kernel on CUDA, chunked torch on CPU.")
    skip_inert_rows: bool = Field(default=True, description="Leave out of the forward/backward the rows whose loss "
                                  "term is exactly zero (advantage 0, e.g. every below-baseline row at "
                                  "negative_weight 0, with no KL term and the constant aggregation): the update is "
                                  "the same, and the per-step monitors (entropy, mismatch, clipping) cover the rows "
                                  "that carry gradient.")
    # run
    checkpoint_every: int = Field(default=1, ge=1, description="Optimizer steps between resumable checkpoints. Only "
                                  "the newest is kept (a killed run resumes from it); the run folder goes once the "
                                  "candidate is registered.")
    threads: int = Field(default=0, ge=0, le=1024, description="torch CPU threads; 0 = all cores.")
    ranks: int = Field(default=1, ge=1, le=1024, description="Data-parallel ranks `rtrl train` runs (one process "
                       "each, under torchrun: GPUs on a GPU machine, gloo on CPU). Rank 0 alone writes the MLflow run, "
                       "the checkpoint and the one candidate version.")
    # memory (trainer/modes.py, trainer/adapters.py)
    precision: str = Field(default="fp32", pattern="^(fp32|bf16|fp16)$",
                           description="fp32 | bf16 | fp16: DeepSpeed mixed precision (16-bit forward/backward, "
                                       "float32 master weights and optimizer; fp16 with dynamic loss scaling, for "
                                       "GPUs without bf16). The candidate is saved in float32 either way.")
    gradient_checkpointing: bool = Field(default=False, description="Recompute each decoder layer's activations in "
                                         "backward instead of keeping them (transformers, non-reentrant).")
    lora_r: int = Field(default=0, ge=0, le=4096, description="LoRA rank; 0 = train every parameter. > 0: train a "
                        "peft LoRA adapter, the candidate is an adapter over a full base checkpoint.")
    lora_alpha: float = Field(default=16.0, gt=0, description="LoRA scale numerator (the update is alpha/r x BA).")
    lora_dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the adapter's input.")
    lora_target_modules: list[str] = Field(default_factory=lambda: list(LORA_TARGETS), min_length=1,
                                           description="Module names that get adapters (attention and MLP "
                                                       "projections). Not the LM head: the fused log-prob path "
                                                       "reads its weight.")

    @field_validator("negative_kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = sorted(set(kinds) - set(NEGATIVE_KINDS))
        if unknown:
            raise ValueError(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(NEGATIVE_KINDS)}")
        return kinds

    @field_validator("lora_target_modules")
    @classmethod
    def _head_not_adapted(cls, targets: list[str]) -> list[str]:
        if {"lm_head", "embed_tokens"} & set(targets):
            raise ValueError("LoRA on lm_head/embed_tokens is not supported: the fused log-prob path reads the "
                             "head's weight")
        return targets

    @model_validator(mode="after")
    def _master_weights_need_zero(self) -> "TrainerConfig":
        if self.precision != "fp32" and self.zero_stage < 1:
            raise ValueError(f"precision {self.precision} needs zero_stage >= 1 (ZeRO keeps the float32 master "
                             "weights and gradients; stage 0 would accumulate gradients in 16 bits)")
        return self


class SpecializeConfig(BaseModel):
    """`[specialize]`: per-organization LoRA adapters over the shared lineage (docs/trainer.md, "Specialization
    by organization"). The adapters train with `[trainer]`'s settings but these LoRA and row settings."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="The cycle's specialize step trains, gates and promotes an "
                          "adapter per org; off: the step does nothing.")
    orgs: list[str] = Field(default_factory=list, description="Orgs that get an adapter; [] = every org with at "
                            "least `min_rows` usable rows in the cycle.")
    min_rows: int = Field(default=128, ge=1, description="An org's usable rows (on-policy for its adapter) below "
                          "which it gets no adapter this cycle.")
    lora_r: int = Field(default=8, ge=1, le=4096, description="The adapters' LoRA rank.")
    lora_alpha: float = Field(default=16.0, gt=0, description="The adapters' LoRA scale numerator.")
    lr: float = Field(default=2e-3, gt=0, le=1, description="The adapters' peak learning rate. A new adapter starts "
                      "at zero (B = 0) and an org has a few hundred rows a cycle: at the shared lineage's rate its "
                      "few steps leave its policy its base's (docs/experiments.md).")
    rows_per_step: int = Field(default=64, ge=1, description="The adapters' rows per optimizer step: an org's rows "
                               "make several steps, not one.")
    max_rows: int = Field(default=256, ge=0, description="An adapter trains on at most this many of its org's "
                          "usable rows per cycle (a seeded sample, as trainer.max_rows); 0 = all.")
    parallel_gates: int = Field(default=1, ge=1, le=64, description="Orgs' candidates gated at once (each its own "
                                "`rtrl gate`): on the running serving (gate.tasks.via_serving) their episodes share "
                                "one LoRA engine's batches; needs serving.max_loras >= the adapters in flight.")

    def trainer(self, cfg: TrainerConfig) -> TrainerConfig:
        """The trainer settings of an org's adapter: `cfg` with this section's LoRA rank and scale, learning rate,
        batch, and most and fewest rows."""
        return cfg.model_copy(update={"lora_r": self.lora_r, "lora_alpha": self.lora_alpha, "lr": self.lr,
                                      "rows_per_step": self.rows_per_step, "max_rows": self.max_rows,
                                      "min_rows": self.min_rows})
