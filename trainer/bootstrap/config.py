"""`[policy]`: the default policy (a small Llama made here) or any Hugging Face causal-LM checkpoint instead.

`rtrl bootstrap` makes checkpoint v0 from these settings: a byte-level BPE tokenizer and a small
`LlamaForCausalLM`, trained by supervised learning on the task generator's demonstrations
(`trainer/bootstrap/`), evaluated on fresh tasks, registered and aliased `champion` and `control`. With
`base_checkpoint` set, that folder is registered as v0 instead and none of the rest is used.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class PolicyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_checkpoint: str = Field(default="", description="An HF causal-LM folder to register as v0 instead of "
                                                         "bootstrapping the default policy; '' = bootstrap.")
    seed: int = Field(default=0, ge=0, description="Seeds the corpus, the initial weights and the batch order.")
    cache_dir: str = Field(default="", description="Where the bootstrapped default policy is kept for reuse: "
                                                   "`rtrl bootstrap` registers it instead of training when it was "
                                                   "made by this recipe from this [policy] config (--fresh "
                                                   "retrains); '' = <state_dir>/policy-v0.")
    # tokenizer and architecture (a standard Llama: any HF or vLLM loader takes it)
    vocab_size: int = Field(default=1536, ge=261, le=262144,
                            description="BPE vocabulary target (256 bytes + 5 special tokens at least); merges "
                                        "stop earlier when the corpus has no more pairs.")
    hidden_size: int = Field(default=192, ge=16, le=16384, description="Model width (the residual stream).")
    intermediate_size: int = Field(default=512, ge=16, le=65536, description="MLP width.")
    layers: int = Field(default=4, ge=1, le=256, description="Decoder layers.")
    heads: int = Field(default=3, ge=1, le=256, description="Attention heads; hidden_size / heads is the head "
                                                            "size (vLLM's CPU attention wants 32, 64, 80, 96, 112, "
                                                            "128 or 256).")
    max_position_embeddings: int = Field(default=1024, ge=64, le=131072,
                                         description="Context length; longer training examples are dropped.")
    copy_circuit: bool = Field(default=True, description="Start layers 0-1 as a copy circuit: an induction head "
                                                          "and a skip-bigram head (trainer/bootstrap/model.py); "
                                                          "needs >= 2 layers, >= 2 heads of >= 48 dims, "
                                                          "hidden_size >= 97.")
    # corpus
    train_orgs: int = Field(default=16, ge=1, le=100000, description="Orgs the demonstration workspaces come from.")
    house_rules: bool = Field(default=False, description="Each demonstration workspace draws a house rule for new "
                              "parameters at random (keyword-only or not, `codetasks.workspace.Org.kwonly`), "
                              "whatever its org: v0 then writes either form where a file does not show the rule, "
                              "as a base model does for an org it has not learned (the simulator's "
                              "`keyword_only_orgs`). Kept apart from the plain v0 (policy-v0-house-rules).")
    train_workspaces: int = Field(default=800, ge=1, le=10_000_000, description="Demonstration workspaces of the "
                                  "training corpus (seed `seed`).")
    tasks_per_workspace: int = Field(default=8, ge=1, le=10000,
                                     description="A chain of tasks per workspace, each applied before the next.")
    repair_rate: float = Field(default=0.0, ge=0.0, le=1.0,
                               description="Share of tasks that also give a repair turn: the edit after a failed "
                                           "attempt and the user's complaint (trainer/bootstrap/corpus.py). 0: "
                                           "v0 answers nearly every such turn with an empty tool call; a positive "
                                           "share also teaches that repair.")
    # supervised training
    steps: int = Field(default=1200, ge=1, le=10_000_000, description="Most optimizer steps (the LR schedule "
                                                                     "spans them); training usually stops earlier "
                                                                     "at target_accuracy.")
    target_accuracy: float = Field(default=0.45, ge=0, le=1,
                                   description="Stop as soon as the sampled (T=1) edit accuracy on the dev tasks "
                                               "reaches this: v0 is imperfect on purpose (RL headroom); 0 = never "
                                               "stop early.")
    confirm_margin: float = Field(default=0.05, ge=0, le=1,
                                  description="A dev check that reaches target_accuracy stops training only when the "
                                              "sampled accuracy on the evaluation tasks (eval_seed, the v0 "
                                              "evaluation's own first pass) reaches target_accuracy - this too; "
                                              "otherwise training goes on. 100 dev tasks are noisy (SE ~0.05): the "
                                              "first check over the target can be luck. 1 = no confirmation.")
    check_after: int = Field(default=250, ge=1, le=10_000_000, description="First step the dev accuracy is checked.")
    check_every: int = Field(default=50, ge=1, le=10_000_000, description="Steps between dev accuracy checks.")
    dev_tasks: int = Field(default=100, ge=1, le=1_000_000,
                           description="Fresh tasks (workspaces of seed eval_seed + 1) for the stop check.")
    batch_size: int = Field(default=16, ge=1, le=65536, description="Examples per step.")
    learning_rate: float = Field(default=1e-3, gt=0, le=1, description="Peak AdamW learning rate (much higher "
                                                                     "rates overwrite the copy-circuit start).")
    warmup_steps: int = Field(default=30, ge=0, le=10_000_000, description="Steps of linear learning-rate warm-up "
                              "before the cosine decay.")
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1, description="Cosine decay ends at this fraction of the peak.")
    weight_decay: float = Field(default=0.1, ge=0, le=10, description="AdamW weight decay.")
    grad_clip: float = Field(default=1.0, gt=0, le=1e6, description="Max global gradient norm.")
    threads: int = Field(default=2, ge=1, le=4096, description="torch CPU threads.")
    log_every: int = Field(default=20, ge=1, le=1_000_000, description="Steps between progress lines.")
    # evaluation on fresh tasks (unseen workspaces)
    eval_seed: int = Field(default=1000, ge=0, description="Seed of the evaluation workspaces and sampling (the dev "
                                                           "check uses eval_seed + 1); `seed` must differ from both.")
    eval_tasks: int = Field(default=200, ge=1, le=1_000_000, description="Fresh tasks (workspaces of seed "
                            "eval_seed) v0's accuracy is reported on.")
    eval_max_new_tokens: int = Field(default=192, ge=1, le=65536, description="Completion budget per response.")
    eval_batch_size: int = Field(default=50, ge=1, le=65536, description="Prompts generated together.")

    @model_validator(mode="after")
    def _consistent(self):
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")
        head_dim = self.hidden_size // self.heads
        if self.copy_circuit and (self.layers < 2 or self.heads < 2 or head_dim < 48 or self.hidden_size < 97):
            raise ValueError(f"copy_circuit needs >= 2 layers, >= 2 heads of >= 48 dims and hidden_size >= 97 "
                             f"(got {self.layers} layers, {self.heads} heads of {head_dim}); or copy_circuit = false")
        if self.seed in (self.eval_seed, self.eval_seed + 1):
            raise ValueError("seed must differ from eval_seed and eval_seed + 1 (the evaluation and the dev check "
                             "use workspaces training never saw)")
        return self
