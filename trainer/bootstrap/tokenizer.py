"""The default policy's tokenizer: a byte-level BPE trained here on the bootstrap corpus.

Byte-level (every byte in the base alphabet), so any text encodes and decodes losslessly; the chat format's role
markers and `<|end|>` are single special tokens (ids 0..4, in `SPECIAL_TOKENS` order). Pre-tokenization is GPT-2's
plus a split at camelCase boundaries, so identifiers never merge into one token: `writeReport` is `write Report`
and `write_report` is `write _ report`, the same pieces as the words of a request ("rename write report"). A
small model learns which code a request names from a few dozen word pieces instead of one token per identifier.
It is wrapped as a `transformers.PreTrainedTokenizerFast` that carries the chat format as its `chat_template`
with eos `<|end|>`, so `apply_chat_template(..., add_generation_prompt=True)` gives exactly
`schemas.chat_format.render(...)` and serving stops at eos, for this tokenizer as for any HF checkpoint's.
"""

from __future__ import annotations

from typing import Iterable

from schemas.chat_format import CHAT_TEMPLATE, END, SPECIAL_TOKENS

CAMEL_HUMP = r"(?<=[a-z])[A-Z][a-z]*"   # "Report" in "writeReport": a piece of its own


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A `PreTrainedTokenizerFast` with a byte-level BPE of about `vocab_size` tokens trained on `texts`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CAMEL_HUMP), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return wrap(tok)


def wrap(tok):
    """A trained `tokenizers.Tokenizer` as a HF fast tokenizer with the chat format (template, eos, pad)."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=END, pad_token=END,
                                   model_max_length=1 << 20, clean_up_tokenization_spaces=False)
    fast.add_special_tokens({"additional_special_tokens": [t for t in SPECIAL_TOKENS if t != END]})
    fast.chat_template = CHAT_TEMPLATE
    return fast
