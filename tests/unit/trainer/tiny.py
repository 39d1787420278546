"""A tiny random Llama checkpoint with a word-level tokenizer, and reward rows sampled from it, for trainer tests."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import torch

VOCAB = 48


def tiny_checkpoint(folder: Path, seed: int = 0, tied: bool = False) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                         pad_token_id=0, eos_token_id=1, bos_token_id=None,
                                         tie_word_embeddings=tied))
    model.save_pretrained(folder, safe_serialization=True)
    vocab = {"<pad>": 0, "<|end|>": 1, **{f"w{i}": i for i in range(2, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<|end|>").save_pretrained(folder)
    return folder


def sampled_rows(folder: Path, n: int, seed: int = 0, version: str = "1") -> pl.DataFrame:
    """n requests: a short prompt, a completion sampled from the checkpoint (with its log-probs), a reward that
    favours completions starting with an even token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        prompt = torch.randint(2, VOCAB, (int(torch.randint(3, 7, (1,), generator=g)),), generator=g).tolist()
        ids, logps = list(prompt), []
        with torch.no_grad():
            for _ in range(int(torch.randint(2, 6, (1,), generator=g))):
                logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1], -1)
                tok = int(torch.multinomial(logp.exp(), 1, generator=g))
                ids.append(tok)
                logps.append(float(logp[tok]))
        completion = ids[len(prompt):]
        rows.append({"request_id": f"r{i:04d}", "policy_version": version, "prompt_token_ids": prompt,
                     "completion_token_ids": completion, "behaviour_logprobs": logps,
                     "reward": 1.0 if completion[0] % 2 == 0 else -1.0, "response_kind": "edit",
                     "mature_time": datetime(2026, 11, 1, tzinfo=timezone.utc)})
    return pl.DataFrame(rows)


def small_trainer_config(**kw):
    """The trainer tests' config: small steps on the tiny model, one thread, every row pushing."""
    from trainer.config import TrainerConfig

    base = dict(micro_batch=4, rows_per_step=16, lr=5e-3, max_tokens=8, min_rows=1, threads=1, negative_weight=1.0)
    return TrainerConfig(**{**base, **kw})
