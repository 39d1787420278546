"""How the policy is held in memory while it trains: precision (`trainer.precision`) and activation checkpointing
(`trainer.gradient_checkpointing`).

Precision is DeepSpeed's own mixed precision: its `bf16` / `fp16` config sections cast the module's parameters to
16 bits for the forward and backward, while the ZeRO optimizer keeps float32 master weights, accumulates the
gradients in float32 and steps them (fp16 adds dynamic loss scaling: a step whose gradients overflow is skipped
and the scale halved). ZeRO stage >= 1 is required: stage 0 with bf16 accumulates gradients in bf16.

The candidate is always saved from the float32 master weights (`master_state_dict`), whatever the precision: at a
billion-parameter learning rate (~1e-6) a cycle moves a weight of 0.02 by less than bf16's spacing there (~1e-4),
so weights rounded to bf16 would lose most of the update; the next cycle loads the float32 weights and casts them
again.

Activation checkpointing is transformers' `gradient_checkpointing_enable` (non-reentrant `torch.utils.checkpoint`):
each decoder layer keeps only its input and recomputes its forward in backward. transformers checkpoints a layer
only while the layer is in training mode, and the trainer runs the policy in eval mode (no dropout: the ratio's
theta_old must be the same function as the policy), so `enable_checkpointing` sets the training flag on the decoder
layers alone, not on their dropout-carrying children.
"""

from __future__ import annotations

import torch

PRECISIONS = ("fp32", "bf16", "fp16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def deepspeed_sections(precision: str) -> dict:
    """The DeepSpeed config sections of `precision` (merged into the engine's config); {} for fp32."""
    if precision == "bf16":
        return {"bf16": {"enabled": True}}
    if precision == "fp16":
        # dynamic loss scaling from 2^16, halved on overflow (the step skipped), doubled after 1000 clean steps
        return {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "hysteresis": 2,
                         "min_loss_scale": 1}}
    if precision == "fp32":
        return {}
    raise ValueError(f"unknown precision {precision!r}: {', '.join(PRECISIONS)}")


def master_state_dict(module: torch.nn.Module, trainable_only: bool = False,
                      keep: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The module's state dict on the CPU in float32, each trained parameter its optimizer's float32 master weight
    (ZeRO's partitions, gathered: a collective under several ranks, so every rank calls it). `keep`: exact values
    of parameters the optimizer does not hold (frozen ones, whose 16-bit cast rounds them), by state-dict name.
    `trainable_only`: just the trained parameters (a LoRA adapter's)."""
    from deepspeed.utils import safe_get_full_fp32_param

    keep = keep or {}
    params = dict(module.named_parameters(remove_duplicate=False))   # tied weights: one parameter, two names
    masters: dict[int, torch.Tensor | None] = {}
    out = {}
    for name, tensor in module.state_dict().items():
        p = params.get(name)
        if trainable_only and (p is None or not p.requires_grad):
            continue
        if p is not None and p.requires_grad and id(p) not in masters:
            masters[id(p)] = safe_get_full_fp32_param(p)
        value = masters.get(id(p)) if p is not None else None
        value = keep.get(name) if value is None and name in keep else value
        value = tensor if value is None else value
        out[name] = value.detach().to("cpu", torch.float32 if value.is_floating_point() else value.dtype).clone()
    return out


def enable_checkpointing(model: torch.nn.Module) -> int:
    """Turn on non-reentrant activation checkpointing of the decoder layers; returns how many layers recompute.
    An error when the model has no checkpointable layer (nothing would be saved)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no layer that supports gradient checkpointing")
    for layer in layers:   # the flag transformers reads, on the layer itself only: its dropouts stay in eval mode
        layer.training = True
    return len(layers)
