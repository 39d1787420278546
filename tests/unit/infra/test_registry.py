"""The model registry helper against a real MLflow SQLite store: register, aliases, download once."""

import json

import pytest

from registry.client import Registry

pytestmark = pytest.mark.slow   # an MLflow store per test: seconds each


def _checkpoint(d, marker: str):
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "marker": marker}))
    (d / "weights.bin").write_bytes(marker.encode() * 100)
    return d


@pytest.fixture
def registry(tmp_path):
    return Registry(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", "policy", tmp_path / "cache")


def test_register_versions_move_aliases_and_download_the_right_files(registry, tmp_path):
    v1 = registry.register(_checkpoint(tmp_path / "a", "one"), tags={"parent": ""})
    v2 = registry.register(_checkpoint(tmp_path / "b", "two"), tags={"parent": v1})
    assert (v1, v2) == ("1", "2") and registry.info(v2).tags["parent"] == "1"
    assert registry.version_of("champion") is None
    registry.set_alias("champion", v1)
    version, path = registry.resolve("champion")
    assert version == "1" and json.loads((path / "config.json").read_text())["marker"] == "one"
    registry.set_alias("champion", v2)
    version, path = registry.resolve("champion")
    assert version == "2" and (path / "weights.bin").read_bytes() == b"two" * 100
    assert registry.local_path("2") == path  # cached: no second download


def test_two_models_in_one_store_never_share_a_cached_checkpoint(registry, tmp_path):
    other = Registry(registry.tracking_uri, tmp_path / "artifacts", "other-model", tmp_path / "cache")
    assert registry.register(_checkpoint(tmp_path / "a", "policy-v1")) == "1"
    assert other.register(_checkpoint(tmp_path / "b", "other-v1")) == "1"
    mine, theirs = registry.local_path("1"), other.local_path("1")   # same version number, same cache root
    assert mine != theirs
    assert json.loads((mine / "config.json").read_text())["marker"] == "policy-v1"
    assert json.loads((theirs / "config.json").read_text())["marker"] == "other-v1"


def test_unset_alias_and_non_checkpoint_folders_are_clear_errors(registry, tmp_path):
    with pytest.raises(LookupError, match="rtrl bootstrap"):
        registry.resolve("champion")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        registry.register(tmp_path / "empty")


def test_every_version_carries_its_content_digest_the_same_for_the_same_model_in_another_registry(registry, tmp_path):
    import shutil

    from registry.client import content_digest

    a = _checkpoint(tmp_path / "a", "one")
    v1, v2 = registry.register(a), registry.register(_checkpoint(tmp_path / "b", "two"))
    assert registry.digest(v1) == content_digest(a) != registry.digest(v2)
    elsewhere = Registry(f"sqlite:///{tmp_path / 'other.db'}", tmp_path / "other-artifacts", "policy",
                         tmp_path / "other-cache")
    copy = shutil.copytree(a, tmp_path / "copy")       # the demo registers a copy of its cached v0
    assert elsewhere.register(copy) == "1" and elsewhere.digest("1") == registry.digest(v1)
    (copy / "rtrl_metadata.json").write_text('{"registered_at": "now"}')   # how it was made: not its content
    assert content_digest(copy) == content_digest(a)
    (copy / "weights.bin").write_bytes(b"one" * 99 + b"onf")
    assert content_digest(copy) != content_digest(a)
    (copy / "weights.bin").rename(copy / "weights2.bin")   # a file's name counts too
    assert content_digest(copy) != content_digest(a)
