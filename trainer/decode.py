"""Lean decoding of a Llama checkpoint on the CPU: the same arithmetic as transformers' Llama forward (RMSNorm,
rotary positions, causal attention, SwiGLU, the tied head), without its per-call machinery.

On the default policy (4 layers x 192) transformers spends ~8 ms per generated token on a 2-core machine, nearly
all of it Python and cache bookkeeping; this decoder's fused projections and preallocated cache take well under
half of that. It exists for the in-process users of a checkpoint: the offline cycle's `LocalPolicy` (one sequence
at a time) and the bootstrap's evaluation (`generate`: left-padded batches, sampled like transformers' `generate`);
serving uses vLLM. `LlamaDecoder.supports(model)` says whether a model can be decoded this way; anything else keeps
transformers' forward.

    dec = LlamaDecoder(model)
    logits = dec.prefill([prompt_ids])          # [1, vocab]: the logits of the token after the prompt
    logits = dec.step(torch.tensor([token]))    # ... after one more token
"""

from __future__ import annotations

import torch


class LlamaDecoder:
    """Incremental decoding of a batch of sequences (left-padded) of a transformers LlamaForCausalLM (float32,
    default rotary positions, no biases)."""

    def __init__(self, model, max_len: int | None = None):
        if not self.supports(model):
            raise ValueError("LlamaDecoder decodes Llama models with default rotary positions and no biases only")
        c = model.config
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        self.eps, self.scale = c.rms_norm_eps, self.head_dim ** -0.5
        inner = model.model
        with torch.no_grad():
            self.embed = inner.embed_tokens.weight.detach()
            self.layers = [(layer.input_layernorm.weight.detach(),
                            torch.cat([layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                                       layer.self_attn.v_proj.weight]).detach().t().contiguous(),
                            layer.self_attn.o_proj.weight.detach().t().contiguous(),
                            layer.post_attention_layernorm.weight.detach(),
                            torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]).detach().t().contiguous(),
                            layer.mlp.down_proj.weight.detach().t().contiguous())
                           for layer in inner.layers]
            self.norm = inner.norm.weight.detach()
            self.head = model.lm_head.weight.detach().t().contiguous()
        self.inv_freq = 1.0 / _rope_theta(c) ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float()
                                                 / self.head_dim)
        # rotate_half(x) = x @ half_turn: the second half negated into the first, the first into the second
        half = self.head_dim // 2
        self.half_turn = torch.zeros(self.head_dim, self.head_dim)
        self.half_turn[half:, :half] = -torch.eye(half)
        self.half_turn[:half, half:] = torch.eye(half)
        self.k_cache = self.v_cache = self.cos = self.sin = torch.empty(0)
        self.pad = torch.zeros(1, dtype=torch.long)   # left padding of each row
        self.length, self.max_len = 0, 0
        self._allocate(1, max_len or c.max_position_embeddings)

    @staticmethod
    def supports(model) -> bool:
        c = getattr(model, "config", None)
        rope = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
        return (getattr(c, "model_type", None) == "llama" and not getattr(c, "attention_bias", True)
                and not getattr(c, "mlp_bias", True) and getattr(c, "hidden_act", None) == "silu"
                and rope.get("rope_type", "default") == "default"
                and getattr(c, "pretraining_tp", 1) == 1 and next(model.parameters()).dtype == torch.float32)

    def _allocate(self, rows: int, max_len: int) -> None:
        """Rotary tables and a key/value cache for `rows` x `max_len` positions, keeping what is cached."""
        freqs = torch.outer(torch.arange(max_len, dtype=torch.int64).float(), self.inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()
        k = torch.zeros(len(self.layers), rows, self.kv_heads, max_len, self.head_dim)
        v = torch.zeros_like(k)
        if self.length:
            k[..., :self.length, :], v[..., :self.length, :] = (self.k_cache[..., :self.length, :],
                                                                self.v_cache[..., :self.length, :])
        self.k_cache, self.v_cache, self.max_len = k, v, max_len

    def prefill(self, rows: list[list[int]], pad_id: int = 0) -> torch.Tensor:
        """Start new sequences, one per prompt (left-padded to the longest); [rows, vocab]: the logits after each
        prompt's last token."""
        width = max(len(r) for r in rows)
        self.pad = torch.tensor([width - len(r) for r in rows], dtype=torch.long)
        self.length = 0
        if self.k_cache.shape[1] != len(rows):
            self._allocate(len(rows), self.max_len)
        ids = torch.tensor([[pad_id] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
        return self._forward(ids)

    def keep(self, rows: torch.Tensor) -> None:
        """Go on with these rows only (indices into the current batch, in the order given): the others' caches are
        dropped, so finished sequences cost nothing in later steps."""
        length = self.length
        shape = list(self.k_cache.shape)
        shape[1] = len(rows)
        k, v = torch.empty(shape), torch.empty(shape)   # positions past `length` are written before they are read
        k[..., :length, :], v[..., :length, :] = self.k_cache[:, rows, :, :length], self.v_cache[:, rows, :, :length]
        self.k_cache, self.v_cache, self.pad = k, v, self.pad[rows]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token to each row; [rows, vocab]: the logits after it."""
        return self._forward(tokens.view(-1, 1))

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.rms_norm(x, weight.shape, weight, self.eps)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def _mask(self, n: int, start: int, end: int) -> torch.Tensor | None:
        """[rows, 1, n, end]: what each query sees (itself and the real tokens up to it); None when that is plain
        causal attention from the start (unpadded: one query, or a first prefill, given to the fused kernel as
        `is_causal`)."""
        padded = bool(self.pad.any())
        if not padded and (n == 1 or start == 0):
            return None
        keys = torch.arange(end)
        queries = torch.arange(start, end).view(n, 1)
        mask = (keys <= queries).unsqueeze(0) & (keys >= self.pad.view(-1, 1, 1))
        return (mask | (keys == queries)).unsqueeze(1)   # a padding query sees itself: no empty softmax

    @torch.no_grad()
    def _forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, n = ids.shape
        start = self.length
        end = start + n
        if end > self.max_len:   # past max_position_embeddings, as transformers' forward goes on too
            self._allocate(b, max(end, 2 * self.max_len))
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        q_size, kv_size = h * d, kv * d
        positions = (torch.arange(start, end).view(1, n) - self.pad.view(-1, 1)).clamp(min=0)   # [rows, n]
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)         # [rows, 1, n, d]
        rotation = None
        if n == 1:   # one position per row: its rotation as one matrix, applied to queries and keys in one product
            rotation = torch.diag_embed(cos[:, 0, 0]) + self.half_turn * sin[:, :, 0]           # [rows, d, d]
            rotation = rotation.unsqueeze(1)
        mask = self._mask(n, start, end)
        x = self.embed[ids]
        for i, (ln1, qkv_w, o_w, ln2, gu_w, down_w) in enumerate(self.layers):
            qkv = self._norm(x, ln1) @ qkv_w                                                   # [rows, n, .]
            if rotation is None:
                q = self._rotate(qkv[..., :q_size].view(b, n, h, d).transpose(1, 2), cos, sin)
                k = self._rotate(qkv[..., q_size:q_size + kv_size].view(b, n, kv, d).transpose(1, 2), cos, sin)
            else:
                qk = qkv[..., :q_size + kv_size].view(b, h + kv, 1, d) @ rotation
                q, k = qk[:, :h], qk[:, h:]
            v = qkv[..., q_size + kv_size:].view(b, n, kv, d).transpose(1, 2)
            self.k_cache[i, :, :, start:end] = k
            self.v_cache[i, :, :, start:end] = v
            keys, values = self.k_cache[i, :, :, :end], self.v_cache[i, :, :, :end]
            if kv != h:
                keys, values = keys.repeat_interleave(h // kv, dim=1), values.repeat_interleave(h // kv, dim=1)
            if n == 1:   # one query: softmax(q k^T / sqrt(d)) v without the fused kernel's set-up cost
                scores = (q @ keys.transpose(-1, -2)) * self.scale
                if mask is not None:
                    scores = scores.masked_fill(~mask, float("-inf"))
                att = torch.softmax(scores, dim=-1) @ values
            else:
                att = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                                       is_causal=mask is None)
            x = x + att.transpose(1, 2).reshape(b, n, q_size) @ o_w
            gate, up = (self._norm(x, ln2) @ gu_w).chunk(2, dim=-1)
            x = x + (torch.nn.functional.silu(gate) * up) @ down_w
        self.length = end
        return self._norm(x[:, -1], self.norm) @ self.head


def generate(model, rows: list[list[int]], *, sample: bool, max_new_tokens: int, eos_id: int, pad_id: int,
             decoder: LlamaDecoder | None = None) -> list[list[int]]:
    """Each prompt's continuation up to and including eos (at most `max_new_tokens`), as transformers' `generate`
    makes it for a left-padded batch: greedy, or sampled at temperature 1 from the whole distribution with one
    `torch.multinomial` draw per step over the batch (the global generator, so a seed set before gives the same
    draws). Rows that reached eos are fed padding until all have or the budget is spent."""
    dec = decoder or LlamaDecoder(model)
    logits = dec.prefill(rows, pad_id)
    out = torch.empty(len(rows), 0, dtype=torch.long)
    running = torch.ones(len(rows), dtype=torch.bool)
    for _ in range(max_new_tokens):
        if sample:
            nxt = torch.multinomial(torch.softmax(logits.float(), dim=-1), num_samples=1).squeeze(1)
        else:
            nxt = logits.argmax(dim=-1)
        nxt = torch.where(running, nxt, torch.full_like(nxt, pad_id))
        out = torch.cat([out, nxt.view(-1, 1)], dim=1)
        running &= nxt != eos_id
        if not running.any() or out.shape[1] == max_new_tokens:
            break
        logits = dec.step(nxt)
    return _up_to_eos(out.tolist(), eos_id)


def transformers_generate(model, rows: list[list[int]], *, sample: bool, max_new_tokens: int, eos_id: int,
                          pad_id: int) -> list[list[int]]:
    """`generate`'s result from transformers' own `generate` on the same left-padded batch (any causal LM)."""
    from transformers import GenerationConfig

    # top_k=0 / top_p=1 explicitly: generate() fills unset values with top_k=50, which truncates the distribution
    extra = {"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {}
    config = GenerationConfig(do_sample=sample, max_new_tokens=max_new_tokens, eos_token_id=eos_id,
                              pad_token_id=pad_id, **extra)
    width = max(map(len, rows))
    ids = torch.tensor([[pad_id] * (width - len(r)) + list(r) for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    return _up_to_eos(out[:, width:].tolist(), eos_id)


def _up_to_eos(rows: list[list[int]], eos_id: int) -> list[list[int]]:
    return [row[:row.index(eos_id) + 1] if eos_id in row else row for row in rows]


def _rope_theta(config) -> float:
    rope = getattr(config, "rope_parameters", None) or {}
    return float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
