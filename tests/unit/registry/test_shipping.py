"""Shipping served weights through a real MLflow SQLite store (registry/shipping.py): the first version an anchor,
its children deltas in bf16, an anchor every N versions; every version rebuilt bit for bit on a fresh host; a
corrupted delta or anchor refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from registry.client import Registry
from registry.delta import DeltaMismatch
from registry.served import in_precision, weights_of
from registry.shipping import ShipPolicy, served_folder, ship, stored
from serving.testing import make_child_checkpoint
from tests.unit.trainer.tiny import tiny_checkpoint

pytestmark = pytest.mark.slow   # an MLflow store per test: seconds each


def _registry(tmp_path: Path, cache: str = "cache") -> Registry:
    return Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / cache)


def _lineage(tmp_path: Path, n: int) -> tuple[Registry, dict[str, Path]]:
    reg = _registry(tmp_path)
    folders = {"1": tiny_checkpoint(tmp_path / "v1")}
    reg.register(folders["1"], tags={"parent": ""})
    for v in range(2, n + 1):
        folders[str(v)] = make_child_checkpoint(folders[str(v - 1)], tmp_path / f"v{v}", seed=v)
        assert reg.register(folders[str(v)], tags={"parent": str(v - 1)}) == str(v)
    return reg, folders


def test_a_lineage_ships_an_anchor_then_bf16_deltas_and_every_version_rebuilds_bit_for_bit(tmp_path):
    reg, folders = _lineage(tmp_path, 5)
    policy = ShipPolicy(precision="bf16", anchor_every=3)
    tags = [ship(reg, str(v), policy, log=lambda *_: None) for v in range(1, 6)]
    assert [t["served.kind"] for t in tags] == ["anchor", "delta", "delta", "anchor", "delta"]
    assert all(int(t["served.bytes"]) < 0.5 * int(t["served.full_bytes"]) for t in tags if t["served.kind"] == "delta")
    assert stored(reg, "3").parent == "2" and ship(reg, "3", policy) == tags[2]     # shipped once
    fresh = _registry(tmp_path, cache="fresh-host")                                  # nothing cached: all from MLflow
    for v in range(1, 6):
        folder = served_folder(fresh, str(v))
        assert weights_of(folder) == in_precision(weights_of(folders[str(v)]), "bf16")
        assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(served_folder(fresh, "5"))
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16


def _artifact(tmp_path: Path, reg: Registry, version: str, name: str, folder: str = "served") -> Path:
    run = reg.info(version).run_id
    return next((tmp_path / "artifacts").rglob(f"{run}/artifacts/{folder}/{name}"))


def _flip(path: Path, at: int, bits: int = 0x01) -> None:
    """Flip `bits` of the byte at `at` (negative: from the end) of the stored file."""
    data = bytearray(path.read_bytes())
    data[at] ^= bits
    path.write_bytes(bytes(data))


def test_a_corrupted_delta_is_refused_and_never_cached(tmp_path):
    reg, _ = _lineage(tmp_path, 3)
    for v in ("1", "2", "3"):
        ship(reg, v, ShipPolicy(precision="bf16"), log=lambda *_: None)
    payload = _artifact(tmp_path, reg, "3", "delta.bin")
    _flip(payload, payload.stat().st_size // 3, 0x10)
    fresh = _registry(tmp_path, cache="fresh-host")
    with pytest.raises(DeltaMismatch, match="version 3"):
        served_folder(fresh, "3")
    assert not (fresh.cache_dir / "policy" / "served-v3").exists()
    assert served_folder(fresh, "2").is_dir()          # the chain below it is sound


def test_a_corrupted_anchor_is_refused(tmp_path):
    reg, _ = _lineage(tmp_path, 1)
    ship(reg, "1", ShipPolicy(), log=lambda *_: None)
    _flip(_artifact(tmp_path, reg, "1", "model.safetensors"), -5)
    with pytest.raises(DeltaMismatch, match="SHA-256"):
        served_folder(_registry(tmp_path, cache="fresh-host"), "1")


def test_a_registry_with_a_ship_policy_ships_at_registration_and_serves_the_verified_copy(tmp_path):
    reg = _registry(tmp_path)
    reg.ship_policy = ShipPolicy(precision="bf16")
    v1 = tiny_checkpoint(tmp_path / "v1")
    assert reg.register(v1, tags={"parent": ""}, log=lambda *_: None) == "1"
    v2 = make_child_checkpoint(v1, tmp_path / "v2", seed=2)
    assert reg.register(v2, tags={"parent": "1"}, log=lambda *_: None) == "2"
    assert [stored(reg, v).kind for v in ("1", "2")] == ["anchor", "delta"]
    fresh = _registry(tmp_path, cache="fresh-host")
    folder = fresh.served_path("2")
    assert folder.name == "served-v2"
    assert weights_of(folder) == in_precision(weights_of(tmp_path / "v2"), "bf16")


def test_a_corrupted_delta_makes_serving_load_the_float32_master_never_the_corrupted_weights(tmp_path, caplog):
    reg, folders = _lineage(tmp_path, 3)
    for v in ("1", "2", "3"):
        ship(reg, v, ShipPolicy(precision="fp32"), log=lambda *_: None)
    payload = _artifact(tmp_path, reg, "3", "delta.bin")
    _flip(payload, payload.stat().st_size // 2)        # one bit of one byte
    fresh = _registry(tmp_path, cache="fresh-host")
    folder = fresh.served_path("3")
    assert folder == fresh.local_path("3") and folder.name == "v3"          # the master, downloaded whole
    assert weights_of(folder) == weights_of(folders["3"])
    assert "failed verification" in caplog.text
    assert not (fresh.cache_dir / "policy" / "served-v3").exists()
    assert fresh.served_path("2").name == "served-v2"                    # its parent's copy is sound


def test_a_version_registered_before_shipping_is_served_from_its_checkpoint(tmp_path):
    reg = _registry(tmp_path)
    reg.register(tiny_checkpoint(tmp_path / "v1"), tags={"parent": ""})
    assert reg.served_path("1") == reg.local_path("1")


def test_retention_deleting_a_version_deletes_its_served_weights_with_its_master(tmp_path):
    from registry.retention_apply import delete_artifacts

    reg = _registry(tmp_path)
    reg.ship_policy = ShipPolicy()
    reg.register(tiny_checkpoint(tmp_path / "v1"), tags={"parent": ""}, log=lambda *_: None)
    run_dir = next((tmp_path / "artifacts").rglob(f"{reg.info('1').run_id}/artifacts"))
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint", "served"]
    delete_artifacts(reg, "1")
    assert list(run_dir.iterdir()) == []


def test_retention_keeps_only_the_served_weights_of_a_version_a_delta_chain_holds_and_the_chain_still_rebuilds(
        tmp_path):
    from datetime import datetime, timedelta, timezone

    from registry.client import ArtifactsDeleted
    from registry.promotion import PromotionRefused, lock_path_for, promote
    from registry.retention import versions_with_artifacts
    from registry.retention_apply import apply_retention

    reg = _registry(tmp_path)
    reg.ship_policy = ShipPolicy(precision="bf16")
    folders = {"1": tiny_checkpoint(tmp_path / "v1")}
    reg.register(folders["1"], tags={"parent": "", "kind": "bootstrap"}, log=lambda *_: None)
    for v in range(2, 5):
        folders[str(v)] = make_child_checkpoint(folders[str(v - 1)], tmp_path / f"v{v}", seed=v)
        reg.register(folders[str(v)], tags={"parent": str(v - 1)}, log=lambda *_: None)
    reg.set_alias("champion", "4")
    lock = lock_path_for(reg.tracking_uri, tmp_path)
    later = datetime.now(timezone.utc) + timedelta(hours=2)
    report = apply_retention(reg, lock, keep_promoted=0, min_age_s=3600, cache_max_bytes=None, now=later)
    assert report["trimmed"] == ["2", "3"] and report["deleted"] == [] and report["failed"] == {}
    for v in ("2", "3"):
        run_dir = next((tmp_path / "artifacts").rglob(f"{reg.info(v).run_id}/artifacts"))
        assert sorted(p.name for p in run_dir.iterdir()) == ["served"]             # the master went
        with pytest.raises(ArtifactsDeleted, match="no float32 master"):
            _registry(tmp_path, cache=f"fresh-{v}").local_path(v)
    assert versions_with_artifacts(reg) == ["1", "4"]
    fresh = _registry(tmp_path, cache="fresh-host")                                # through v2's and v3's deltas
    assert weights_of(fresh.served_path("4")) == in_precision(weights_of(folders["4"]), "bf16")
    reg.set_version_tags("3", {"gate.decision": "promote", "gate.champion_version": "4"})
    with pytest.raises(PromotionRefused, match="float32 master was deleted"):
        promote(reg, "3", lock, force=True)
    again = apply_retention(reg, lock, keep_promoted=0, min_age_s=3600, cache_max_bytes=None, now=later)
    assert again["trimmed"] == [] and again["to_trim"] == [] and again["keep"] == 4       # done once


def test_when_both_the_served_copy_and_the_master_are_corrupted_nothing_is_served(tmp_path):
    reg, _ = _lineage(tmp_path, 2)
    for v in ("1", "2"):
        ship(reg, v, ShipPolicy(), log=lambda *_: None)
    for folder, name in (("served", "delta.bin"), ("checkpoint", "model.safetensors")):
        path = _artifact(tmp_path, reg, "2", name, folder)
        _flip(path, path.stat().st_size // 2)
    with pytest.raises(DeltaMismatch, match="does not match the digest registered"):
        _registry(tmp_path, cache="fresh-host").served_path("2")


@pytest.mark.parametrize("weights, data, said", [
    ("pytorch_model.bin", b"\0" * 8, "no safetensors weights"),
    ("model.safetensors", bytes(range(256)) * 4, "cannot be read as safetensors")])
def test_a_checkpoint_shipping_cannot_read_registers_unshipped_and_is_served_as_it_is(tmp_path, weights, data, said):
    reg = _registry(tmp_path)
    reg.ship_policy = ShipPolicy()
    folder = tmp_path / "odd-ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / weights).write_bytes(data)
    lines = []
    assert reg.register(folder, log=lines.append) == "1"
    assert "served.kind" not in reg.info("1").tags and said in lines[0]
    assert reg.served_path("1") == reg.local_path("1")
