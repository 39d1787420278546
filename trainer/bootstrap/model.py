"""The default policy's architecture: a small, standard `LlamaForCausalLM`, so any HF or vLLM loader takes it.

Initialization plants a copy circuit (an induction and a skip-bigram head), then everything is trained. Editing
code is mostly copying: the `old` text of an edit is a line of the file, the path and the names come from the
prompt. Transformers learn to copy through induction heads (Olsson et al., 2022, "In-context learning and
induction heads"), which appear only after a long plateau - more compute than a few minutes of two CPU cores (a
randomly initialized model here had learned no copying at all after 600 SFT steps). So the first two layers start
as that circuit, written into the weights (the mechanism of the paper, and of Bietti et al., 2023, "Birth of a
transformer: a memory viewpoint"):

    embeddings   each token's identity as a unit vector in a `TOK` subspace, plus one constant coordinate
    layer 0      head 0 attends to the previous position, head 1 to the one before (RoPE: query and key built
                 from the constant coordinate so the score depends only on the distance); they copy the token
                 vectors found there into subspaces P1 and P2
    layer 1      head 0 (induction): query = this token and the previous one, key = the two tokens before a
                 position, both in RoPE's slowest dimensions (nearly position-free); a position whose preceding
                 bigram equals the current one wins, and the head writes that position's token into TOK, which the
                 tied output embedding reads as "predict this token"
                 head 1 (skip-bigram): query = the previous token, key = the token two before a position; a
                 position two after an earlier occurrence of the previous token wins whatever lies between, and
                 the head writes its token into TOK. Induction alone copies only what followed the same bigram:
                 `ITEMS_TIMEOUT =` then finds the file's old value, never the 43 of "Set ITEMS_TIMEOUT to 43."
                 (measured: v0 made 0 of 54 `change_constant` edits right, and still 0 after 1000 SFT steps,
                 when every other kind was at 0.6-0.9; with this head the kind reached 0.76 by step 950)

Every other weight keeps the standard initialization, and SFT trains all of them (the circuit included). The
result is still a plain Llama checkpoint: nothing here exists at load time.
"""

from __future__ import annotations

import math

TOK = 32            # dimensions of the token-identity subspace (and of each copied subspace)
POS_PAIRS = 8       # RoPE frequency pairs (fastest first) that the previous-token heads use
CONTENT_PAIRS = 16  # RoPE frequency pairs (slowest) that the induction head matches content in
ROPE_THETA = 1e6    # makes the slowest pairs rotate < 0.3 rad over 300 positions


def llama_config(policy, tokenizer):
    """A `LlamaConfig` from `[policy]`'s sizes; the vocabulary is the tokenizer's, padded to a multiple of 64."""
    from transformers import LlamaConfig

    vocab = -(-len(tokenizer) // 64) * 64
    return LlamaConfig(
        vocab_size=vocab, hidden_size=policy.hidden_size, intermediate_size=policy.intermediate_size,
        num_hidden_layers=policy.layers, num_attention_heads=policy.heads, num_key_value_heads=policy.heads,
        head_dim=policy.hidden_size // policy.heads, max_position_embeddings=policy.max_position_embeddings,
        rms_norm_eps=1e-5, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        hidden_act="silu", initializer_range=0.02,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def build_model(policy, tokenizer, seed: int, copy_circuit: bool | None = None):
    """A freshly initialized model (float32 for training), the same for the same seed; the copy circuit is planted
    when `copy_circuit` (default: `policy.copy_circuit`)."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(policy, tokenizer)).float()
    if policy.copy_circuit if copy_circuit is None else copy_circuit:
        plant_copy_circuit(model, seed)
    return model


def copy_circuit_fits(config) -> str:
    """'' when the sizes allow the circuit, else why not."""
    hd = config.head_dim
    if config.num_hidden_layers < 2 or config.num_attention_heads < 2:
        return "needs at least 2 layers and 2 heads"
    if config.hidden_size < 3 * TOK + 1:
        return f"needs hidden_size >= {3 * TOK + 1}"
    if hd < 2 * max(POS_PAIRS, CONTENT_PAIRS) or hd // 2 < POS_PAIRS + CONTENT_PAIRS or hd < TOK:
        return f"needs head_dim >= {2 * (POS_PAIRS + CONTENT_PAIRS)}"
    return ""


def _orthogonal(n: int, gen):
    import torch

    q, r = torch.linalg.qr(torch.randn(n, n, generator=gen))
    return q * torch.sign(torch.diagonal(r))


def _write_head(attn, head: int, wq, wk, wv, dest: slice, out) -> None:
    """Head `head` of `attn` gets these query, key and value rows; its output writes only `out` (TOK x TOK, from
    the head's first TOK value dimensions) into the residual dimensions `dest`."""
    hd = wq.shape[0]
    rows = slice(head * hd, (head + 1) * hd)
    attn.q_proj.weight[rows] = wq
    attn.k_proj.weight[rows] = wk
    attn.v_proj.weight[rows] = wv
    attn.o_proj.weight[:, rows] = 0.0
    attn.o_proj.weight[dest, head * hd:head * hd + out.shape[1]] = out


def plant_copy_circuit(model, seed: int, pos_gap: float = 6.0, match_logit: float = 12.0,
                       copy_gain: float = 3.0) -> None:
    """Write the circuit of the module docstring into `model` (in place). `pos_gap`: attention-logit margin of the
    previous-token heads over the neighbouring positions; `match_logit`: induction score of a matching bigram;
    `copy_gain`: the copied token's weight in the residual relative to the current token's."""
    import torch

    cfg = model.config
    why = copy_circuit_fits(cfg)
    if why:
        raise ValueError(f"copy circuit: {why}")
    gen = torch.Generator().manual_seed(seed + 1)
    d, hd, n_tok = cfg.hidden_size, cfg.head_dim, cfg.vocab_size
    tok, const, p1, p2 = slice(0, TOK), TOK, slice(TOK + 1, 2 * TOK + 1), slice(2 * TOK + 1, 3 * TOK + 1)
    half = hd // 2
    inv_freq = [ROPE_THETA ** (-2 * i / hd) for i in range(half)]
    content = [i for i in range(half - CONTENT_PAIRS, half)]
    content_dims = content + [i + half for i in content]          # 2 * CONTENT_PAIRS dims of a head
    layers = model.model.layers

    with torch.no_grad():
        emb = model.model.embed_tokens.weight                        # tied with lm_head
        ids = torch.randn(n_tok, TOK, generator=gen)
        emb[:, tok] = ids / ids.norm(dim=1, keepdim=True)
        emb[:, const] = 1.0
        emb[:, TOK + 1:3 * TOK + 1] = 0.0
        # the residual after layer 0's input norm: |x| ~ 1.41 (token + constant), so x_norm = x * sqrt(d) / 1.41
        k0 = math.sqrt(d) / math.sqrt(2.0)
        for head, (offset, dest) in enumerate(((1, p1), (2, p2))):
            attn = layers[0].self_attn
            wq, wk, wv = (torch.zeros(hd, d) for _ in range(3))
            # score(m, n) = sum_i a * cos((n - m + offset) * f_i): largest at n = m - offset
            a = pos_gap / sum(1 - math.cos(f) for f in inv_freq[:POS_PAIRS]) * math.sqrt(hd)
            for i in range(POS_PAIRS):
                wq[i, const] = math.sqrt(a) / k0
                wk[i, const] = math.sqrt(a) / k0 * math.cos(offset * inv_freq[i])
                wk[i + half, const] = math.sqrt(a) / k0 * math.sin(offset * inv_freq[i])
            wv[:TOK, tok] = torch.eye(TOK) / k0                        # the attended token's unit vector
            _write_head(attn, head, wq, wk, wv, dest, torch.eye(TOK))
        # layer 1's input: token, constant, previous, previous-but-one (|x| ~ 2) -> x_norm = x * sqrt(d) / 2
        k1 = math.sqrt(d) / 2.0
        A, B = _orthogonal(TOK, gen), _orthogonal(TOK, gen)
        s = math.sqrt(match_logit / 2 * math.sqrt(hd)) / k1            # a full bigram match scores match_logit
        attn = layers[1].self_attn
        wq, wk, wv = (torch.zeros(hd, d) for _ in range(3))
        cd = torch.tensor(content_dims)
        wq[cd, tok], wq[cd, p1] = A * s, B * s                         # query: this token, the previous one
        wk[cd, p1], wk[cd, p2] = A * s, B * s                          # key: the two tokens before the position
        wv[:TOK, tok] = torch.eye(TOK) / k1
        _write_head(attn, 0, wq, wk, wv, tok, torch.eye(TOK) * copy_gain)
        # layer 1 head 1, skip-bigram: one matched token scores what a full bigram match scores in head 0
        C = _orthogonal(TOK, gen)
        s1 = math.sqrt(match_logit * math.sqrt(hd)) / k1
        wq, wk = torch.zeros(hd, d), torch.zeros(hd, d)
        wq[cd, p1], wk[cd, p2] = C * s1, C * s1                        # query: previous token; key: two before
        _write_head(attn, 1, wq, wk, wv, tok, torch.eye(TOK) * copy_gain)
        # nothing else writes into the circuit's subspaces at the start (other heads and MLPs read them freely)
        for layer in layers[:2]:
            for h in range(2, cfg.num_attention_heads):
                layer.self_attn.o_proj.weight[:3 * TOK + 1, h * hd:(h + 1) * hd] = 0.0
            layer.mlp.down_proj.weight[:3 * TOK + 1] = 0.0


def n_parameters(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
