"""`rtrl bench decode`: in-process decoding of a model of the default policy's shape (`[policy]`: its sizes, a
vocabulary of `vocab` tokens, random weights of a fixed seed), `trainer.decode` against transformers.

  lean_prefill_ms / transformers_prefill_ms        one sequence: the `prompt_tokens` prompt at once, ...
  lean_ms_per_token / transformers_ms_per_token    ... then `new_tokens` steps of one token each (what
                                                   `LocalPolicy` does per request)
  max_abs_logit_diff                               largest difference between the two's logits over those steps
  lean_batch_s / transformers_batch_s              `batch` left-padded prompts (lengths spread up to prompt_tokens),
                                                   sampled for `new_tokens` tokens from the same seed (what the
                                                   bootstrap's evaluation does per batch)
  same_tokens                                      both made the same tokens, in both measurements
"""

from __future__ import annotations

import random
import time
from typing import Callable


def _model(policy, vocab: int, seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.bootstrap.model import ROPE_THETA

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=policy.hidden_size, intermediate_size=policy.intermediate_size,
                      num_hidden_layers=policy.layers, num_attention_heads=policy.heads,
                      num_key_value_heads=policy.heads, head_dim=policy.hidden_size // policy.heads,
                      max_position_embeddings=policy.max_position_embeddings, tie_word_embeddings=True,
                      rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA}, pad_token_id=4, eos_token_id=4)
    return LlamaForCausalLM(cfg).float().eval()


def _one_sequence(model, prompt: list[int], new_tokens: int) -> dict:
    """Greedy steps through both decoders (each fed its own argmax), timed separately."""
    import torch

    from trainer.decode import LlamaDecoder

    dec = LlamaDecoder(model)
    t0 = time.perf_counter()
    logits = [dec.prefill([prompt])[0]]
    t1 = time.perf_counter()
    for _ in range(new_tokens):
        logits.append(dec.step(logits[-1].argmax().view(1))[0])
    lean = (t1 - t0, time.perf_counter() - t1)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        ref = [out.logits[0, -1]]
        t1 = time.perf_counter()
        for _ in range(new_tokens):
            out = model(input_ids=ref[-1].argmax().view(1, 1), past_key_values=out.past_key_values, use_cache=True)
            ref.append(out.logits[0, -1])
    hf = (t1 - t0, time.perf_counter() - t1)
    return {"lean_prefill_ms": round(1000 * lean[0], 1), "transformers_prefill_ms": round(1000 * hf[0], 1),
            "lean_ms_per_token": round(1000 * lean[1] / new_tokens, 3),
            "transformers_ms_per_token": round(1000 * hf[1] / new_tokens, 3),
            "max_abs_logit_diff": float(max((a - b).abs().max() for a, b in zip(logits, ref))),
            "same_tokens": [int(x.argmax()) for x in logits] == [int(x.argmax()) for x in ref]}


def _batch(model, prompts: list[list[int]], new_tokens: int, seed: int) -> dict:
    import torch

    from trainer.decode import generate, transformers_generate

    ends = {"sample": True, "max_new_tokens": new_tokens, "eos_id": model.config.eos_token_id,
            "pad_id": model.config.pad_token_id}
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    lean = generate(model, prompts, **ends)
    lean_s = time.perf_counter() - t0
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    ref = transformers_generate(model, prompts, **ends)
    hf_s = time.perf_counter() - t0
    return {"lean_batch_s": round(lean_s, 3), "transformers_batch_s": round(hf_s, 3), "same_tokens": lean == ref,
            "batch_tokens": sum(map(len, lean))}


def run(policy, *, vocab: int = 960, prompt_tokens: int = 800, new_tokens: int = 100, batch: int = 50,
        threads: int = 2, seed: int = 0, log: Callable[[str], None] = print) -> dict:
    import torch

    torch.set_num_threads(threads)
    model = _model(policy, vocab, seed)
    rng = random.Random(seed)
    prompt = [rng.randrange(5, vocab) for _ in range(prompt_tokens)]
    log(f"[bench] one sequence: {prompt_tokens}-token prompt, {new_tokens} steps")
    single = _one_sequence(model, prompt, new_tokens)
    prompts = [[rng.randrange(5, vocab) for _ in range(rng.randint(prompt_tokens // 4, prompt_tokens))]
               for _ in range(batch)]
    log(f"[bench] a batch of {batch} left-padded prompts, {new_tokens} sampled tokens")
    batched = _batch(model, prompts, new_tokens, seed)
    return {"layers": policy.layers, "hidden": policy.hidden_size, "vocab": vocab, "threads": threads,
            "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "batch": batch,
            **{k: v for k, v in single.items() if k != "same_tokens"},
            "speedup_per_token": round(single["transformers_ms_per_token"] / single["lean_ms_per_token"], 2),
            **{k: v for k, v in batched.items() if k != "same_tokens"},
            "speedup_batch": round(batched["transformers_batch_s"] / batched["lean_batch_s"], 2),
            "same_tokens": single["same_tokens"] and batched["same_tokens"]}
