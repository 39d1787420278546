"""Served weights (registry/served.py): a float32 checkpoint cast to bf16 as torch casts it, sharded the way Hugging
Face loads it, read back bit for bit."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from registry.served import in_precision, shards, weight_files, weights_of, write_weights


def _master(tmp_path):
    g = torch.Generator().manual_seed(0)
    weights = {"model.embed_tokens.weight": torch.randn(300, 32, generator=g),
               "model.layers.0.mlp.up_proj.weight": torch.randn(64, 32, generator=g),
               "model.norm.weight": torch.ones(32),
               "step": torch.tensor([7], dtype=torch.int64)}
    save_file(weights, str(tmp_path / "model.safetensors"))
    return weights


def test_bf16_served_weights_are_torchs_cast_and_integers_stay_as_they_are(tmp_path):
    weights = _master(tmp_path)
    served = in_precision(weights_of(tmp_path), "bf16")
    assert {n: t.dtype for n, t in served.items()} == {
        "model.embed_tokens.weight": "BF16", "model.layers.0.mlp.up_proj.weight": "BF16", "model.norm.weight": "BF16",
        "step": "I64"}
    expect = weights["model.embed_tokens.weight"].to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    assert served["model.embed_tokens.weight"].data == expect
    assert in_precision(weights_of(tmp_path), "fp32") == weights_of(tmp_path)
    with pytest.raises(ValueError, match="precision"):
        in_precision({}, "int4")


def test_sharded_served_weights_load_in_transformers_layout_and_read_back_bit_for_bit(tmp_path):
    from safetensors.torch import load_file

    (tmp_path / "master").mkdir()
    _master(tmp_path / "master")
    served = in_precision(weights_of(tmp_path / "master"), "bf16")
    paths = write_weights(tmp_path / "served", served, shard_bytes=8_000)
    assert len(paths) == 2 and (tmp_path / "served" / "model.safetensors.index.json").is_file()   # the embedding alone
    assert weight_files(tmp_path / "served") == sorted(paths)
    assert weights_of(tmp_path / "served") == served
    loaded = {}
    for p in paths:
        loaded.update(load_file(str(p)))
    assert loaded["model.norm.weight"].dtype == torch.bfloat16 and loaded["step"].item() == 7
    single = write_weights(tmp_path / "one", served)
    assert [p.name for p in single] == ["model.safetensors"] and weights_of(tmp_path / "one") == served


def test_shards_keep_name_order_and_put_a_large_tensor_alone():
    from registry.delta import Tensor

    t = {n: Tensor("U8", (size,), bytes(size)) for n, size in (("a", 4), ("b", 4), ("c", 20), ("d", 1))}
    assert shards(t, 10) == [["a", "b"], ["c"], ["d"]]
    assert shards({}, 10) == []
    with pytest.raises(ValueError):
        shards(t, 0)
