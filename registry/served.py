"""A version's served weights: its float32 master checkpoint cast to the serving precision, as sharded safetensors
that Hugging Face and vLLM load.

    tensors = weights_of(master_folder)                   # {name: Tensor} from model.safetensors or its shards
    served = in_precision(tensors, "bf16")                # float tensors cast (round to nearest even), others kept
    write_weights(folder, served, shard_bytes=2**30)      # model.safetensors, or model-0000i-of-0000n + index

The cast is torch's (the same bits the trainer's bf16 forward sees). A delta (registry/delta.py) is taken between
two versions' served tensors, so it is exact in the precision serving runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from registry.delta import ITEMSIZE, Tensor, read_safetensors, write_safetensors

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
PRECISIONS = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}
FLOATS = ("F32", "F64", "F16", "BF16")


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder: its index's shards, else model.safetensors."""
    folder = Path(folder)
    if (folder / INDEX).is_file():
        index = json.loads((folder / INDEX).read_text())
        return [folder / name for name in sorted(set(index["weight_map"].values()))]
    if (folder / SINGLE).is_file():
        return [folder / SINGLE]
    raise FileNotFoundError(f"{folder}: no {SINGLE} nor {INDEX}")


def weights_of(folder: Path) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for path in weight_files(folder):
        out.update(read_safetensors(path))
    return out


def in_precision(tensors: dict[str, Tensor], precision: str) -> dict[str, Tensor]:
    """Every floating-point tensor cast to `precision` ("fp32", "bf16", "fp16"); integer tensors as they are."""
    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {sorted(PRECISIONS)}")
    target = PRECISIONS[precision]
    torch_of = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16}
    bits_of = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    out = {}
    for name, t in tensors.items():
        if t.dtype not in FLOATS or t.dtype == target:
            out[name] = t
            continue
        src = torch.frombuffer(bytearray(t.data), dtype=torch_of[t.dtype]).reshape(t.shape)
        cast = src.to(torch_of[target]).contiguous()
        out[name] = Tensor(target, t.shape, cast.view(bits_of[ITEMSIZE[target]]).numpy().tobytes())
    return out


def shards(tensors: dict[str, Tensor], shard_bytes: int) -> list[list[str]]:
    """Tensor names in name order, packed into shards of at most `shard_bytes` (a larger tensor alone)."""
    if shard_bytes < 1:
        raise ValueError(f"shard_bytes must be positive, not {shard_bytes}")
    out: list[list[str]] = [[]]
    size = 0
    for name in sorted(tensors):
        n = len(tensors[name].data)
        if out[-1] and size + n > shard_bytes:
            out.append([])
            size = 0
        out[-1].append(name)
        size += n
    return out if out[0] else []


def write_weights(folder: Path, tensors: dict[str, Tensor], shard_bytes: int = 2**30) -> list[Path]:
    """The tensors as Hugging Face lays them out: one model.safetensors, or shards named model-0000i-of-0000n with
    the index mapping each tensor to its shard (written last)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    groups = shards(tensors, shard_bytes)
    if len(groups) <= 1:
        return [write_safetensors(folder / SINGLE, tensors, {"format": "pt"})]
    names = [f"model-{i:05d}-of-{len(groups):05d}.safetensors" for i in range(1, len(groups) + 1)]
    paths = [write_safetensors(folder / fname, {n: tensors[n] for n in group}, {"format": "pt"})
             for fname, group in zip(names, groups)]
    index = {"metadata": {"total_size": sum(len(t.data) for t in tensors.values())},
             "weight_map": {n: fname for fname, group in zip(names, groups) for n in group}}
    (folder / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True))
    return paths
