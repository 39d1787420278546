"""Triton kernel: per-token log-probs and entropy of the sampled tokens, over vocabulary blocks.

One program per row (token position). Forward streams the row's logits in blocks of BLOCK, keeping an online
softmax (running max m, sum of exp s, sum of exp*x w), so neither the softmax nor the log-softmax is ever
materialized; it saves only lse and E_p[x] per row. Backward streams the row again, recomputes p = exp(x - lse)
block by block and writes the logits' gradient (formulas in `trainer.logprobs`).

Runs on CUDA; on CPU only under TRITON_INTERPRET=1 (the tests). `trainer.logprobs.token_logprobs` chooses it
on CUDA and the chunked torch path elsewhere.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _forward(logits_ptr, tokens_ptr, lp_ptr, ent_ptr, lse_ptr, mean_ptr, V, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.full([], 0.0, tl.float32)
    w = tl.full([], 0.0, tl.float32)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        x = tl.load(base + offs, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        scale = tl.exp(m - m_new)
        e = tl.where(mask, tl.exp(x - m_new), 0.0)
        s = s * scale + tl.sum(e, 0)
        w = w * scale + tl.sum(e * tl.where(mask, x, 0.0), 0)
        m = m_new
    lse = m + tl.log(s)
    mean = w / s
    t = tl.load(tokens_ptr + row)
    xt = tl.load(base + t).to(tl.float32)
    tl.store(lp_ptr + row, xt - lse)
    tl.store(ent_ptr + row, lse - mean)
    tl.store(lse_ptr + row, lse)
    tl.store(mean_ptr + row, mean)


@triton.jit
def _backward(logits_ptr, tokens_ptr, lse_ptr, mean_ptr, g_lp_ptr, g_ent_ptr, grad_ptr, V, stride, grad_stride,
              BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride
    gbase = grad_ptr + row.to(tl.int64) * grad_stride
    lse = tl.load(lse_ptr + row)
    mean = tl.load(mean_ptr + row)
    gl = tl.load(g_lp_ptr + row)
    ge = tl.load(g_ent_ptr + row)
    t = tl.load(tokens_ptr + row)
    for start in range(0, V, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < V
        x = tl.load(base + offs, mask=mask, other=0.0).to(tl.float32)
        p = tl.exp(x - lse)
        g = -p * gl - ge * p * (x - mean) + tl.where(offs == t, gl, 0.0)
        tl.store(gbase + offs, g.to(grad_ptr.dtype.element_ty), mask=mask)


class _FusedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor):
        logits = logits.contiguous()
        tokens = tokens.contiguous()
        n, v = logits.shape
        out = [torch.empty(n, dtype=torch.float32, device=logits.device) for _ in range(4)]
        lp, ent, lse, mean = out
        if n:
            _forward[(n,)](logits, tokens, lp, ent, lse, mean, v, logits.stride(0), BLOCK=min(BLOCK, triton.next_power_of_2(v)))
        ctx.save_for_backward(logits, tokens, lse, mean)
        return lp, ent

    @staticmethod
    def backward(ctx, g_lp: torch.Tensor, g_ent: torch.Tensor):
        logits, tokens, lse, mean = ctx.saved_tensors
        n, v = logits.shape
        g_lp = torch.zeros_like(lse) if g_lp is None else g_lp.float().contiguous()
        g_ent = torch.zeros_like(lse) if g_ent is None else g_ent.float().contiguous()
        grad = torch.empty_like(logits)
        if n:
            _backward[(n,)](logits, tokens, lse, mean, g_lp, g_ent, grad, v, logits.stride(0), grad.stride(0),
                            BLOCK=min(BLOCK, triton.next_power_of_2(v)))
        return grad, None


def fused_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs, entropy) for logits [N, V] and tokens [N] (int64)."""
    return _FusedLogprobs.apply(logits, tokens)


def row_stats(logits: torch.Tensor, tokens: torch.Tensor):
    """(lse, E_p[x], logprob, entropy) per row, forward only (the linear path's chunks use it)."""
    logits, tokens = logits.contiguous(), tokens.contiguous()
    n, v = logits.shape
    lp, ent, lse, mean = (torch.empty(n, dtype=torch.float32, device=logits.device) for _ in range(4))
    if n:
        _forward[(n,)](logits, tokens, lp, ent, lse, mean, v, logits.stride(0), BLOCK=min(BLOCK, triton.next_power_of_2(v)))
    return lse, mean, lp, ent
