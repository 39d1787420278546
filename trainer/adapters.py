"""LoRA adapters (peft) as policy versions.

With `trainer.lora_r > 0` the trainer trains a LoRA adapter instead of the whole model, and the candidate is an
adapter folder in peft's format (adapter_config.json + adapter_model.safetensors) with the tokenizer and
rtrl_metadata.json. It is registered like a full checkpoint, tagged `adapter=true` and `lora_base=<version>`: the
registry version of the full checkpoint it applies to. What the trainer loads, by champion and config:

    champion          lora_r   trainable model
    full checkpoint   0        the checkpoint, every parameter (as before)
    full checkpoint   > 0      a new adapter over it (the champion becomes the base)
    adapter           > 0      base + the champion's adapter, the adapter trainable (its own r, alpha, targets)
    adapter           0        base with the champion's adapter merged in, every parameter (a full candidate)

`merged` writes an adapter merged into its base as a full Hugging Face checkpoint, for consumers that load full
checkpoints (the gate's in-process decoding); serving loads adapters as they are (vLLM LoRA).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

from registry.client import LORA_BASE as BASE_TAG
from registry.client import is_adapter


def is_peft(model: torch.nn.Module) -> bool:
    """Whether a loaded model is a peft model (peft is only imported by a run that uses it)."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def base_of(registry, version: str, folder: str | Path) -> tuple[str | None, Path | None]:
    """(version, local folder) of the full checkpoint that the adapter `version` applies to, from its `lora_base`
    tag; (None, None) when `version` is a full checkpoint."""
    if not is_adapter(folder):
        return None, None
    base = registry.info(version).tags.get(BASE_TAG) or json.loads(
        (Path(folder) / "rtrl_metadata.json").read_text()).get(BASE_TAG)
    if not base:
        raise LookupError(f"adapter version {version} names no base checkpoint (no {BASE_TAG!r} tag)")
    return str(base), registry.local_path(str(base))


def lineage(registry, parent: str, parent_base: str | None) -> dict[str, str]:
    """The registry tags (and metadata) of an adapter candidate trained from `parent`: its base is the parent's
    base when the parent is an adapter, else the parent itself."""
    base = parent_base or parent
    return {"adapter": "true", BASE_TAG: base, "lora_base_uri": f"models:/{registry.model}/{base}"}


def lora_config(cfg):
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), bias="none", task_type="CAUSAL_LM")


def load_policy(folder: str | Path, base_folder: str | Path | None, cfg) -> torch.nn.Module:
    """A policy folder (full or adapter) as a trainable float32 model, per the table in the module docstring.
    `base_folder`: the full checkpoint an adapter folder applies to (`base_of`); `cfg`: the TrainerConfig."""
    from transformers import AutoModelForCausalLM

    if not is_adapter(folder):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        if cfg.lora_r:
            from peft import get_peft_model

            model = _dropout_on(get_peft_model(model, lora_config(cfg)))
        return model
    if base_folder is None:
        raise ValueError(f"{folder} is a LoRA adapter: its base checkpoint folder is needed to load it")
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(folder), is_trainable=bool(cfg.lora_r))
    if cfg.lora_r:
        return _dropout_on(model)
    return model.merge_and_unload().requires_grad_(True)


def _dropout_on(model):
    """The trainer runs the policy in eval mode (no dropout anywhere); the adapter's own dropout, when its config
    asks for one, is the exception: those modules alone in training mode."""
    for name, module in model.named_modules():
        if ".lora_dropout." in f".{name}." and isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.train()
    return model


def save_weights(module: torch.nn.Module, folder: Path, state_dict: dict | None, base_uri: str = "") -> None:
    """Write the policy's weights into `folder`: a peft adapter (adapter_config.json + adapter_model.safetensors,
    `base_model_name_or_path` = `base_uri`, not this machine's path) for a peft model, else a full Hugging Face
    checkpoint. `state_dict`: the tensors to write (float32 master weights), None = the module's own."""
    kw = {} if state_dict is None else {"state_dict": state_dict}
    if is_peft(module):
        for config in module.peft_config.values():
            config.base_model_name_or_path = base_uri
        # embeddings are never adapted (config refuses them): no look-up of the base to check their vocabulary
        module.save_pretrained(folder, safe_serialization=True, save_embedding_layers=False, **kw)
        return
    module.save_pretrained(folder, safe_serialization=True, **kw)
    if state_dict is not None:   # the tensors written are float32 whatever the module's compute dtype
        path = folder / "config.json"
        config = json.loads(path.read_text())
        config["dtype"] = "float32"
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def merged(folder: str | Path, base_folder: str | Path, out: str | Path) -> Path:
    """The adapter in `folder` merged into the full checkpoint `base_folder`, written to `out` as a full float32
    Hugging Face checkpoint with the adapter's tokenizer and rtrl_metadata.json (plus `merged_from`)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, base_folder, out = Path(folder), Path(base_folder), Path(out)
    base = AutoModelForCausalLM.from_pretrained(base_folder, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    if (base_folder / "generation_config.json").is_file():
        shutil.copyfile(base_folder / "generation_config.json", out / "generation_config.json")
    meta_path = folder / "rtrl_metadata.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    meta["merged_from"] = {"adapter": str(folder), "base": str(base_folder)}
    (out / "rtrl_metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
    return out
