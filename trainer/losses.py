"""Policy-gradient losses, one small function per variant, chosen by name from config (docs/trainer.md).

Notation, per sample i (a served request) and completion token t (mask m_it = 1 on real tokens):
    R_i            the reward row's scalar reward
    A_i            advantage = R_i - b_i (baselines below), optionally / std (off by default)
    logp_it        log pi_theta(token) under the policy being trained (with gradient)
    old_it         log pi_theta_old(token): the trainer's policy before this update (no gradient); with one pass
                   over fresh data it equals logp_it's value
    beh_it         log mu(token): the behaviour log-prob serving logged when it sampled the token
    ref_it         log pi_ref(token): the reference policy (the parent checkpoint), for the KL penalty

Baselines (`advantages`):
    group mean     b_i = mean of R over the samples of i's prompt group (GRPO, Shao et al. 2024, DeepSeekMath);
                   used where a group has at least 2 samples. The group is the request's `group_id` where serving
                   drew n > 1 samples for one request, else the prompt's token ids (`trainer.train.prompt_groups`);
    leave-one-out  b_i = mean of R over the other samples of i's stratum in the batch (`trainer.stratify_by`,
                   e.g. the org; one stratum by default) (Kool et al. 2019 "Buy 4 REINFORCE samples, get a
                   baseline for free!"; RLOO, Ahmadian et al. 2024), for samples without a group.
                   A stratum of one sample gets b_i = R_i (A_i = 0).
    std            A_i /= (std of R in the group/stratum + eps), only when `normalize_std` (Dr. GRPO, Liu et al.
                   2025, shows it biases toward easy/hard prompts; off by default).
    negatives      A_i *= w where A_i < 0 (`negative_weight`, 0 <= w <= 1): an asymmetric REINFORCE that weighs
                   below-baseline samples less (cf. Arnal et al. 2025, "Asymmetric REINFORCE for off-policy RL";
                   w = 0 keeps only above-baseline samples, like reward-ranked fine-tuning, RAFT, Dong et al. 2023).
                   Pushing down a sampled token hands its probability to every other token; on the default policy
                   that drifted it toward malformed tool calls within a few steps (README, "Policy improvement,
                   offline").

Decision tokens (`negative_tokens` N > 0): the advantages come unscaled, and `negative_weight` w applies per token:
    A_it = A_i                 where A_i >= 0, or t is among the first N completion tokens
    A_it = w A_i               otherwise
so a below-baseline row pushes down only how it began (e.g. `<tool_call>` rather than a question), not the
content tokens whose push-down hands probability to malformed alternatives.

Per-token surrogate (`pg_clip`, PPO's clipped objective, Schulman et al. 2017, with truncated importance
sampling for the sampler/trainer mismatch, Yao et al. 2025 "Your efficient RL framework secretly brings you
off-policy RL training"):
    r_it   = exp(logp_it - old_it)
    w_it   = min(exp(old_it - beh_it), tis_cap)                          (no gradient)
    l_it   = -w_it * min(r_it A_i, clip(r_it, 1 - eps_low, 1 + eps_high) A_i)
`pg` is the same without clipping: l_it = -w_it r_it A_i (REINFORCE with the IS weight).
Stale rows (an older policy served them) carry a sample weight c_i (their truncated sequence-level importance
ratio, from data selection) that multiplies l_it.

KL to the reference (added as kl_coef * KL, per token; Schulman 2020 "Approximating KL divergence"):
    k1 = logp_it - ref_it                       (the -log r estimator, r = pi_ref / pi_theta; the default)
    k3 = (r - 1) - log r,  r = exp(ref_it - logp_it)   (unbiased, always >= 0)

Aggregation of per-token values L_it into the scalar loss (`aggregate`):
    constant    sum_it m_it L_it / C, C a fixed constant (e.g. max tokens x batch): no per-sample length
                normalization, so long and short responses weigh each token the same (Dr. GRPO; the default);
    token_mean  sum m L / sum m (DAPO, Yu et al. 2025);
    seq_mean    mean over samples of (sum_t m L / sum_t m) (the original GRPO: length-biased).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

AGGREGATIONS = ("constant", "token_mean", "seq_mean")
KL_ESTIMATORS = ("k1", "k3")


@dataclass
class Advantages:
    values: torch.Tensor       # [B]
    baselines: torch.Tensor    # [B]
    from_group: torch.Tensor   # [B] bool: the baseline is a group mean (else leave-one-out)


def advantages(rewards: torch.Tensor, groups: list | None = None, strata: list | None = None,
               normalize_std: bool = False, eps: float = 1e-6,
               negative_weight: float | torch.Tensor = 1.0) -> Advantages:
    """Group-mean baseline where a prompt group has >= 2 samples, else leave-one-out within the stratum;
    negative advantages scaled by `negative_weight` (one number, or one per row)."""
    w = torch.as_tensor(negative_weight, dtype=torch.float64)
    if w.numel() and not (0.0 <= float(w.min()) and float(w.max()) <= 1.0):
        raise ValueError(f"negative_weight must be in [0, 1], got {negative_weight}")
    r = rewards.double()
    n = r.shape[0]
    groups = groups if groups is not None else [None] * n
    strata = strata if strata is not None else [""] * n
    base = torch.empty_like(r)
    scale = torch.ones_like(r)
    from_group = torch.zeros(n, dtype=torch.bool)
    members: dict = {}
    for i, g in enumerate(groups):
        if g is not None:
            members.setdefault(("g", g), []).append(i)
    for key in [k for k, v in members.items() if len(v) < 2]:
        del members[key]
    grouped = {i for v in members.values() for i in v}
    for i, s in enumerate(strata):
        if i not in grouped:
            members.setdefault(("s", s), []).append(i)
    for (kind, _), idx in members.items():
        ix = torch.tensor(idx)
        vals = r[ix]
        if kind == "g":
            base[ix] = vals.mean()
            from_group[ix] = True
        elif len(idx) == 1:
            base[ix] = vals
        else:
            base[ix] = (vals.sum() - vals) / (len(idx) - 1)
        if normalize_std and len(idx) > 1:
            scale[ix] = vals.std(unbiased=False) + eps
    adv = (r - base) / scale
    adv = torch.where(adv < 0, adv * w, adv)
    return Advantages(adv.to(rewards.dtype), base.to(rewards.dtype), from_group)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str = "constant",
              constant: float | None = None) -> torch.Tensor:
    """Per-token values [B, T] -> scalar (see the module docstring)."""
    m = mask.to(per_token.dtype)
    if mode == "constant":
        if constant is None or constant <= 0:
            raise ValueError("aggregation 'constant' needs a positive constant (e.g. max_tokens * batch size)")
        return (per_token * m).sum() / constant
    if mode == "token_mean":
        return (per_token * m).sum() / m.sum().clamp(min=1)
    if mode == "seq_mean":
        return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()
    raise ValueError(f"unknown aggregation {mode!r}; choose one of {', '.join(AGGREGATIONS)}")


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    log_r = ref_logp - logp
    return torch.exp(log_r) - 1 - log_r


KL: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"k1": kl_k1, "k3": kl_k3}


@dataclass
class LossInputs:
    logp: torch.Tensor                     # [B, T] with gradient
    old_logp: torch.Tensor                 # [B, T]
    behaviour_logp: torch.Tensor           # [B, T]
    advantages: torch.Tensor               # [B]
    mask: torch.Tensor                     # [B, T]
    sample_weight: torch.Tensor | None = None   # [B] (stale rows' truncated IS weight), default 1
    ref_logp: torch.Tensor | None = None   # [B, T], needed when kl_coef > 0


@dataclass
class LossConfig:
    variant: str = "pg_clip"
    clip_low: float = 0.2
    clip_high: float = 0.28
    tis_cap: float = 2.0
    kl_coef: float = 0.0
    kl_estimator: str = "k1"
    aggregation: str = "constant"
    constant: float | None = None
    negative_tokens: int = 0           # > 0: advantages are unscaled; negative_weight applies past these tokens
    negative_weight: float = 1.0


@dataclass
class LossOutput:
    loss: torch.Tensor            # scalar, what backward() is called on
    pg_loss: torch.Tensor         # scalar (detached), the policy-gradient part
    kl: torch.Tensor              # scalar (detached), mean KL per token (0 when not computed)
    clipped_fraction: float       # share of tokens whose ratio was clipped (and the clip was active)
    ratio_mean: float
    tis_weight_mean: float
    mismatch: float               # mean |old_logp - behaviour_logp|: train/inference log-prob mismatch
    tokens: int


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> float:
    return float((x * m).sum() / m.sum().clamp(min=1))


def _surrogate(inp: LossInputs, cfg: LossConfig, clip: bool):
    m = inp.mask.to(inp.logp.dtype)
    a = inp.advantages.to(inp.logp.dtype).unsqueeze(-1)
    if cfg.negative_tokens > 0 and cfg.negative_weight != 1.0:
        head = torch.cumsum(inp.mask.to(torch.int64), dim=1) <= cfg.negative_tokens
        tail = torch.where(head, torch.ones_like(m), torch.full_like(m, cfg.negative_weight))
        a = torch.where(a < 0, a * tail, a)
    ratio = torch.exp(inp.logp - inp.old_logp.detach())
    w = torch.exp(inp.old_logp.detach() - inp.behaviour_logp).clamp(max=cfg.tis_cap)
    unclipped = ratio * a
    if clip:
        clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high) * a
        per_token = -w * torch.minimum(unclipped, clipped)
        active = (clipped < unclipped).to(m.dtype)
    else:
        per_token = -w * unclipped
        active = torch.zeros_like(m)
    if inp.sample_weight is not None:
        per_token = per_token * inp.sample_weight.to(per_token.dtype).unsqueeze(-1)
    return per_token, ratio, w, active, m


def _finish(per_token, ratio, w, active, m, inp: LossInputs, cfg: LossConfig) -> LossOutput:
    pg = aggregate(per_token, inp.mask, cfg.aggregation, cfg.constant)
    loss, kl_mean = pg, torch.zeros(())
    if cfg.kl_coef > 0:
        if inp.ref_logp is None:
            raise ValueError("kl_coef > 0 needs ref_logp (the reference policy's log-probs)")
        if cfg.kl_estimator not in KL:
            raise ValueError(f"unknown KL estimator {cfg.kl_estimator!r}; choose one of {', '.join(KL)}")
        kl = KL[cfg.kl_estimator](inp.logp, inp.ref_logp.detach())
        loss = loss + cfg.kl_coef * aggregate(kl, inp.mask, cfg.aggregation, cfg.constant)
        kl_mean = torch.tensor(_masked_mean(kl.detach(), m))
    return LossOutput(loss, pg.detach(), kl_mean, _masked_mean(active, m), _masked_mean(ratio.detach(), m),
                      _masked_mean(w, m), _masked_mean((inp.old_logp - inp.behaviour_logp).abs(), m),
                      int(m.sum()))


def pg_clip_loss(inp: LossInputs, cfg: LossConfig) -> LossOutput:
    """PPO-clipped surrogate with truncated IS and optional KL (module docstring)."""
    return _finish(*_surrogate(inp, cfg, clip=True), inp, cfg)


def pg_loss(inp: LossInputs, cfg: LossConfig) -> LossOutput:
    """Plain policy gradient (no ratio clipping) with truncated IS and optional KL (module docstring)."""
    return _finish(*_surrogate(inp, cfg, clip=False), inp, cfg)


VARIANTS: dict[str, Callable[[LossInputs, LossConfig], LossOutput]] = {"pg_clip": pg_clip_loss, "pg": pg_loss}


def policy_loss(inp: LossInputs, cfg: LossConfig) -> LossOutput:
    if cfg.variant not in VARIANTS:
        raise ValueError(f"unknown loss variant {cfg.variant!r}; choose one of {', '.join(VARIANTS)}")
    return VARIANTS[cfg.variant](inp, cfg)
