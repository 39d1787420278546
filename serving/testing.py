"""A tiny random-init Llama checkpoint for serving tests and `rtrl bench serving` (no download, a second or two).

    folder = make_tiny_checkpoint(tmp_path / "tiny", seed=0)   # an HF folder: config, safetensors, tokenizer

The tokenizer is a byte-level BPE trained here on generated text (so every string tokenizes), with the chat
format's special tokens (`schemas.chat_format.SPECIAL_TOKENS`), eos `<|end|>` and the chat template
`schemas.chat_format.CHAT_TEMPLATE`: exactly what serving expects of any checkpoint. Different seeds give
different weights (the same tokenizer), so two versions of "the policy" can be told apart.

    adapter = make_tiny_adapter(tmp_path / "lora", folder, base_version="1", seed=5)   # a peft LoRA adapter of it
    child = make_child_checkpoint(folder, tmp_path / "v2", seed=2)  # the same weights, 2 % of each matrix moved
"""

from __future__ import annotations

import random
from pathlib import Path

from schemas.chat_format import CHAT_TEMPLATE, END, SPECIAL_TOKENS
from schemas.tool_protocol import CLOSE, OPEN, TOOLS, ToolCall

_WORDS = ("def class return import from self value result error file path line test list dict print "
          "the a to of and in is it for this that fix bug add change update read write run lint search "
          "edit function variable retry timeout config user request response please why what how").split()


def _corpus(n: int, seed: int) -> list[str]:
    """Generated training text: chat-formatted turns, code-ish lines and tool calls."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        words = " ".join(rnd.choice(_WORDS) for _ in range(rnd.randint(3, 12)))
        name = rnd.choice(sorted(TOOLS))
        call = ToolCall(name, {a: rnd.choice(_WORDS) + ".py" for a, _ in TOOLS[name].args}).text()
        out.append(f"<|user|>\n{words}?\n<|assistant|>\n{call}{END}\n")
        out.append(f"    {rnd.choice(_WORDS)} = {rnd.randint(0, 999)}  # {words}\n")
    return out


def make_tokenizer(vocab_size: int = 512, seed: int = 0):
    """A `PreTrainedTokenizerFast` with the chat format's special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS) + [OPEN, CLOSE],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(2000, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=END, pad_token=END,
                                   additional_special_tokens=[t for t in SPECIAL_TOKENS if t != END])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_tiny_checkpoint(folder: str | Path, seed: int = 0, *, hidden: int = 64, layers: int = 2, heads: int = 2,
                         intermediate: int | None = None, vocab_size: int = 512, max_positions: int = 2048,
                         tied: bool = False) -> Path:
    """Write a random-init `LlamaForCausalLM` (fp32 safetensors) and its tokenizer to `folder`; `tied` shares the
    LM head with the input embedding (as the default policy does). vLLM's CPU attention needs a head size of at
    least 32 (hidden / heads)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(vocab_size)
    eos = tokenizer.convert_tokens_to_ids(END)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=intermediate or 2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=max_positions, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                         tie_word_embeddings=tied, torch_dtype="float32")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    with torch.no_grad():  # a less flat distribution than the default init, so logprobs differ between tokens (a
        # tied head is also the embedding, whose larger scale sharpens the distribution: at 0.5 it is one-hot)
        model.lm_head.weight.normal_(0.0, 0.1 if tied else 0.5)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def make_child_checkpoint(parent: str | Path, folder: str | Path, seed: int = 0, share: float = 0.02,
                          step: float = 0.05) -> Path:
    """A copy of checkpoint `parent` with `share` of each matrix's elements moved by `step` (a training cycle's
    worth of change, as a child version's delta would hold); everything else is bit-identical."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    folder = Path(folder)
    shutil.copytree(parent, folder)
    weights = load_file(str(folder / "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    for w in weights.values():
        if w.dim() == 2:
            idx = torch.randint(0, w.numel(), (max(1, int(w.numel() * share)),), generator=g)
            w.view(-1)[idx] += step
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def make_tiny_adapter(folder: str | Path, base_folder: str | Path, base_version: str, seed: int = 0, *,
                      rank: int = 8, scale: float = 0.2) -> Path:
    """A peft LoRA adapter (every linear layer of the attention and MLP, rank `rank`) of the checkpoint in
    `base_folder`, written to `folder` with rtrl_metadata.json naming `base_version` as its `lora_base`
    (serving/lora.py). Its B matrices are random (peft starts them at 0, which would make the adapter a no-op), so
    the adapted model differs from the base."""
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    model = AutoModelForCausalLM.from_pretrained(str(base_folder), dtype=torch.float32)
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    adapted = get_peft_model(model, lora)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * scale)
    adapted.save_pretrained(str(folder))
    (folder / "rtrl_metadata.json").write_text(json.dumps({"lora_base": str(base_version)}))
    return folder
