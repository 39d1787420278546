"""Per-token log-probs (and entropy) of the sampled tokens, without keeping a full log-softmax.

For logits x (N rows, V classes) and sampled tokens t:
    lse_n       = log sum_j exp(x_nj)
    logprob_n   = x_n,t_n - lse_n
    entropy_n   = lse_n - sum_j p_nj x_nj              (p = softmax(x))
Gradients (what backward writes, recomputing p from x and the saved lse):
    d logprob_n / d x_nj = 1[j = t_n] - p_nj
    d entropy_n / d x_nj = -p_nj (x_nj - E_p[x_n])

Four implementations of the same function:
    `naive_token_logprobs`     log_softmax + gather: materializes N x V log-probs (and autograd keeps them);
    `chunked_token_logprobs`   rows in chunks, softmax recomputed in backward: extra memory chunk x V (CPU default);
    `trainer.kernels.fused_logprobs`  a Triton kernel over vocabulary blocks (GPU; CPU under TRITON_INTERPRET=1);
    `linear_token_logprobs`    from hidden states and the output head's weight, in row chunks: each chunk's logits
                               are made, used and dropped, and recomputed in backward, so neither the logits nor
                               their gradient ever exist whole (what the trainer uses for Llama-family models).
`token_logprobs(..., impl="auto")` picks Triton on CUDA, chunked otherwise.
"""

from __future__ import annotations

import torch

DEFAULT_CHUNK = 1024
LINEAR_CHUNK = 128   # rows per chunk of the linear path: its logits are recomputed, so keep chunks small (at
# vocabulary 32k, 128 rows: peak 0.16 of the naive path, 256 rows: 0.21-0.26, no measurable difference in speed)


def naive_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: (logprobs, entropy), each shaped like `tokens`."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    lp = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return lp, entropy


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor, chunk: int):
        n = logits.shape[0]
        lp = torch.empty(n, dtype=torch.float32, device=logits.device)
        ent = torch.empty_like(lp)
        lse = torch.empty_like(lp)
        mean_x = torch.empty_like(lp)
        for s in range(0, n, chunk):
            x = logits[s:s + chunk].float()
            lse_c = torch.logsumexp(x, dim=-1)
            p = torch.exp(x - lse_c.unsqueeze(-1))
            ex = (p * x).sum(-1)
            lse[s:s + chunk], mean_x[s:s + chunk] = lse_c, ex
            lp[s:s + chunk] = x.gather(-1, tokens[s:s + chunk].unsqueeze(-1)).squeeze(-1) - lse_c
            ent[s:s + chunk] = lse_c - ex
        ctx.save_for_backward(logits, tokens, lse, mean_x)
        ctx.chunk = chunk
        return lp, ent

    @staticmethod
    def backward(ctx, g_lp: torch.Tensor, g_ent: torch.Tensor):
        logits, tokens, lse, mean_x = ctx.saved_tensors
        grad = torch.empty_like(logits)
        g_lp = torch.zeros_like(lse) if g_lp is None else g_lp.float()
        g_ent = torch.zeros_like(lse) if g_ent is None else g_ent.float()
        for s in range(0, logits.shape[0], ctx.chunk):
            x = logits[s:s + ctx.chunk].float()
            p = torch.exp(x - lse[s:s + ctx.chunk].unsqueeze(-1))
            gl, ge = g_lp[s:s + ctx.chunk].unsqueeze(-1), g_ent[s:s + ctx.chunk].unsqueeze(-1)
            g = -p * gl - ge * p * (x - mean_x[s:s + ctx.chunk].unsqueeze(-1))
            g.scatter_add_(-1, tokens[s:s + ctx.chunk].unsqueeze(-1), gl)
            grad[s:s + ctx.chunk] = g.to(grad.dtype)
        return grad, None, None


def chunked_token_logprobs(logits: torch.Tensor, tokens: torch.Tensor,
                           chunk: int = DEFAULT_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs, entropy) for 2-D logits [N, V] and tokens [N]; memory beyond the logits: chunk x V."""
    return _ChunkedLogprobs.apply(logits, tokens, chunk)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, impl: str = "auto",
                   chunk: int = DEFAULT_CHUNK) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs, entropy) shaped like `tokens`, for logits [..., V]. impl: auto | triton | chunked | naive."""
    shape = tokens.shape
    flat_logits, flat_tokens = logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1)
    if impl == "auto":
        impl = "triton" if logits.is_cuda else "chunked"
    if impl == "naive":
        lp, ent = naive_token_logprobs(flat_logits, flat_tokens)
    elif impl == "chunked":
        lp, ent = chunked_token_logprobs(flat_logits, flat_tokens, chunk)
    elif impl == "triton":
        from trainer.kernels.fused_logprobs import fused_token_logprobs

        lp, ent = fused_token_logprobs(flat_logits, flat_tokens)
    else:
        raise ValueError(f"unknown log-prob implementation {impl!r}: auto, triton, chunked or naive")
    return lp.reshape(shape), ent.reshape(shape)


def _chunk_stats(x: torch.Tensor, tokens: torch.Tensor, impl: str):
    """lse, E_p[x], logprob, entropy of one chunk of logits (torch here; the Triton kernel on CUDA)."""
    if impl == "triton":
        from trainer.kernels.fused_logprobs import row_stats

        return row_stats(x, tokens)
    lse = torch.logsumexp(x, dim=-1)
    xt = x.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    p = (x - lse.unsqueeze(-1)).exp_()
    mean_x = p.mul_(x).sum(-1)  # in place: two chunk-sized buffers at most
    return lse, mean_x, xt - lse, lse - mean_x


class _LinearLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor, chunk: int, impl: str):
        n = hidden.shape[0]
        lp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        ent, lse, mean_x = torch.empty_like(lp), torch.empty_like(lp), torch.empty_like(lp)
        for s in range(0, n, chunk):
            x = (hidden[s:s + chunk] @ weight.t()).float()
            lse[s:s + chunk], mean_x[s:s + chunk], lp[s:s + chunk], ent[s:s + chunk] = _chunk_stats(
                x, tokens[s:s + chunk], impl)
        ctx.save_for_backward(hidden, weight, tokens, lse, mean_x)
        ctx.chunk = chunk
        return lp, ent

    @staticmethod
    def backward(ctx, g_lp: torch.Tensor, g_ent: torch.Tensor):
        hidden, weight, tokens, lse, mean_x = ctx.saved_tensors
        g_lp = torch.zeros_like(lse) if g_lp is None else g_lp.float()
        g_ent = torch.zeros_like(lse) if g_ent is None else g_ent.float()
        grad_h = torch.empty_like(hidden)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for s in range(0, hidden.shape[0], ctx.chunk):
            h = hidden[s:s + ctx.chunk]
            x = (h @ weight.t()).float()
            p = (x - lse[s:s + ctx.chunk].unsqueeze(-1)).exp_()
            gl, ge = g_lp[s:s + ctx.chunk].unsqueeze(-1), g_ent[s:s + ctx.chunk].unsqueeze(-1)
            # g = -p * (gl + ge * (x - E[x])), built in x's buffer: two chunk-sized buffers at most
            g = x.sub_(mean_x[s:s + ctx.chunk].unsqueeze(-1)).mul_(ge).add_(gl).mul_(p).neg_()
            g.scatter_add_(-1, tokens[s:s + ctx.chunk].unsqueeze(-1), gl)
            grad_h[s:s + ctx.chunk] = (g.to(weight.dtype) @ weight).to(grad_h.dtype)
            grad_w.addmm_(g.t(), h.float())
        return grad_h, grad_w.to(weight.dtype), None, None, None


def linear_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor,
                          chunk: int = LINEAR_CHUNK, impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs, entropy) of `tokens` under logits = hidden @ weight.T, for hidden [N, H], weight [V, H]; memory
    beyond the inputs: chunk x V (and weight-sized for its gradient). impl: auto | triton | chunked."""
    if impl == "auto":
        impl = "triton" if hidden.is_cuda else "chunked"
    if impl not in ("triton", "chunked"):
        raise ValueError(f"linear log-probs support the triton and chunked paths, not {impl!r}")
    return _LinearLogprobs.apply(hidden, weight, tokens, chunk, impl)
