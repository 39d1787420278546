"""Weight deltas (registry/delta.py): exact to the bit in bf16 and float32, the smaller encoding per tensor, and a
corrupted or misapplied delta refused before any tensor is returned."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from registry.delta import (DeltaMismatch, Tensor, apply, encode, read_delta, read_safetensors, write_delta,
                            write_safetensors)


def _tensor(t: torch.Tensor) -> Tensor:
    dtype = {torch.bfloat16: "BF16", torch.float32: "F32"}[t.dtype]
    width = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[t.dtype]
    return Tensor(dtype, tuple(t.shape), t.contiguous().view(width).numpy().tobytes())


def _model(dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"embed.weight": torch.randn(512, 64, generator=g).to(dtype),
            "layers.0.mlp.weight": torch.randn(256, 64, generator=g).to(dtype),
            "norm.weight": torch.ones(64, dtype=dtype)}


def _step(weights: dict[str, torch.Tensor], share: float, seed: int = 1) -> dict[str, torch.Tensor]:
    """About `share` of each matrix's elements moved by a small update (a learning-rate-sized step)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, w in weights.items():
        w = w.clone()
        if w.dim() == 2:
            mask = torch.rand(w.shape, generator=g) < share
            w[mask] = (w.float()[mask] * (1 + 1e-2 * torch.randn(int(mask.sum()), generator=g))).to(w.dtype)
        out[name] = w
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_delta_rebuilds_the_child_bit_for_bit_and_ships_a_small_share_when_few_elements_changed(dtype):
    parent = {n: _tensor(t) for n, t in _model(dtype).items()}
    child_t = _step(_model(dtype), share=0.01)
    child_t["layers.0.mlp.weight"][0, 0] = float("nan")          # bit patterns, not values: NaN and -0.0 survive
    child_t["layers.0.mlp.weight"][0, 1] = -0.0
    child = {n: _tensor(t) for n, t in child_t.items()}
    delta = encode(parent, child)
    assert apply(parent, delta) == child
    kinds = {e.name: e.kind for e in delta.entries}
    assert kinds["norm.weight"] == "same" and {kinds["embed.weight"], kinds["layers.0.mlp.weight"]} <= {"xor", "sparse"}
    assert delta.stored_bytes < 0.1 * delta.full_bytes
    assert 0 < delta.changed_elements < 0.02 * sum(t.bits().size for t in child.values())


def test_a_dense_change_is_stored_as_xor_a_new_tensor_in_full_and_a_dropped_one_is_listed():
    parent = {n: _tensor(t) for n, t in _model(torch.bfloat16).items()}
    child_t = _step(_model(torch.bfloat16), share=0.9)
    child_t["lm_head.weight"] = torch.randn(8, 64).to(torch.bfloat16)
    del child_t["norm.weight"]
    child = {n: _tensor(t) for n, t in child_t.items()}
    delta = encode(parent, child)
    kinds = {e.name: e.kind for e in delta.entries}
    assert kinds == {"embed.weight": "xor", "layers.0.mlp.weight": "xor", "lm_head.weight": "full"}
    assert delta.removed == ["norm.weight"]
    assert apply(parent, delta) == child


def test_a_few_changed_elements_of_a_large_tensor_are_stored_as_positions_and_values():
    a = torch.randn(1024, 1024).to(torch.bfloat16)
    b = a.clone()
    b.view(-1)[torch.randperm(a.numel(), generator=torch.Generator().manual_seed(0))[:10]] += 1
    parent, child = {"w": _tensor(a)}, {"w": _tensor(b)}
    delta = encode(parent, child)
    assert (delta.entries[0].kind, delta.entries[0].changed) == ("sparse", 10) and delta.stored_bytes < 200
    assert apply(parent, delta) == child


def test_every_single_flipped_byte_of_a_delta_is_caught(tmp_path):
    parent = {n: _tensor(t) for n, t in _model(torch.bfloat16).items()}
    child = {n: _tensor(t) for n, t in _step(_model(torch.bfloat16), share=0.05).items()}
    folder = write_delta(tmp_path / "d", encode(parent, child))
    good = read_delta(folder)
    assert apply(parent, good) == child
    payload = (folder / "delta.bin").read_bytes()
    rng = np.random.default_rng(0)
    for pos in sorted({0, len(payload) - 1, *rng.integers(0, len(payload), 40).tolist()}):
        bad = bytearray(payload)
        bad[pos] ^= 0x01
        (folder / "delta.bin").write_bytes(bytes(bad))
        with pytest.raises(DeltaMismatch):
            apply(parent, read_delta(folder))


def test_a_delta_applied_to_another_parent_or_with_a_wrong_digest_is_refused():
    parent = {n: _tensor(t) for n, t in _model(torch.float32).items()}
    other = {n: _tensor(t) for n, t in _model(torch.float32, seed=9).items()}
    child = {n: _tensor(t) for n, t in _step(_model(torch.float32), share=0.02).items()}
    delta = encode(parent, child)
    with pytest.raises(DeltaMismatch, match="SHA-256"):
        apply(other, delta)
    delta.entries[0].sha256 = "0" * 64
    with pytest.raises(DeltaMismatch, match=delta.entries[0].name):
        apply(parent, delta)
    with pytest.raises(DeltaMismatch, match="parent has no"):
        apply({}, encode(parent, child))


def test_safetensors_files_round_trip_bit_exact_in_bf16(tmp_path):
    from safetensors.torch import load_file, save_file

    weights = _model(torch.bfloat16)
    save_file(weights, str(tmp_path / "a.safetensors"))
    tensors = read_safetensors(tmp_path / "a.safetensors")
    assert tensors == {n: _tensor(t) for n, t in weights.items()}
    write_safetensors(tmp_path / "b.safetensors", tensors, {"format": "pt"})
    back = load_file(str(tmp_path / "b.safetensors"))
    assert all(torch.equal(back[n].view(torch.int16), weights[n].view(torch.int16)) for n in weights)


def test_a_folder_without_its_manifest_holds_no_delta(tmp_path):
    with pytest.raises(DeltaMismatch, match="not a readable delta"):
        read_delta(tmp_path)
