"""The checkpoint cache bounded in bytes (registry.cache): cached copies of deleted versions go first, then stale
unfinished downloads, then the least recently downloaded versions nothing holds until the cache fits; held versions
stay even past the bound. Decisions from injected sizes and times; `prune` on real folders."""

from __future__ import annotations

import os
from pathlib import Path

from registry.cache import CacheEntry, choose_evictions, prune, scan

NOW = 1_000_000.0


def entry(version, size, age_s, model="policy") -> CacheEntry:
    return CacheEntry(model, None if version is None else str(version), Path(f"/c/{model}/v{version}"), size,
                      NOW - age_s)


def chosen(entries, **kw) -> list[tuple[str, str | None]]:
    return [(e.model, e.version) for e, _ in choose_evictions(entries, now_s=NOW, **kw)]


def test_under_the_bound_nothing_goes():
    assert chosen([entry(1, 10, 50), entry(2, 10, 40)], max_bytes=20, protected=set()) == []


def test_over_the_bound_the_least_recently_downloaded_unheld_versions_go_until_it_fits():
    entries = [entry(1, 10, 50), entry(2, 10, 40), entry(3, 10, 30), entry(4, 10, 20)]
    assert chosen(entries, max_bytes=25, protected={("policy", "1")}) == [("policy", "2"), ("policy", "3")]


def test_held_versions_stay_even_when_they_alone_exceed_the_bound():
    entries = [entry(1, 100, 50), entry(2, 100, 40), entry(3, 5, 30)]
    assert chosen(entries, max_bytes=10, protected={("policy", "1"), ("policy", "2")}) == [("policy", "3")]


def test_copies_of_deleted_versions_go_even_under_the_bound_unless_held():
    entries = [entry(1, 1, 50), entry(2, 1, 40)]
    assert chosen(entries, max_bytes=10**9, protected={("policy", "2")},
                  gone={("policy", "1"), ("policy", "2")}) == [("policy", "1")]


def test_an_unfinished_download_goes_only_once_it_has_not_moved_for_an_hour():
    entries = [entry(None, 5, 7200), entry(None, 5, 60)]
    got = choose_evictions(entries, max_bytes=0, protected=set(), now_s=NOW)
    assert [(e.mtime, why) for e, why in got] == [(NOW - 7200, "unfinished download or eviction")]


def test_versions_of_two_models_with_the_same_number_are_told_apart():
    entries = [entry(1, 10, 50, model="policy"), entry(1, 10, 40, model="policy.org-acme")]
    assert chosen(entries, max_bytes=10, protected={("policy", "1")}) == [("policy.org-acme", "1")]


def _cached(root: Path, model: str, version: str, size: int, mtime: float) -> Path:
    d = root / model / f"v{version}"
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"x" * size)
    os.utime(d, (mtime, mtime))
    return d


def test_prune_removes_the_chosen_folders_and_reports_bytes(tmp_path):
    old = _cached(tmp_path, "policy", "1", 1000, NOW - 300)
    held = _cached(tmp_path, "policy", "2", 1000, NOW - 200)
    new = _cached(tmp_path, "policy", "3", 1000, NOW - 100)
    (tmp_path / "policy" / "not-a-version").mkdir()
    assert {(e.version, e.bytes) for e in scan(tmp_path)} == {("1", 1002), ("2", 1002), ("3", 1002)}

    dry = prune(tmp_path, max_bytes=2500, protected={("policy", "2")}, now_s=NOW, dry_run=True)
    assert [e["version"] for e in dry["evicted"]] == ["1"] and old.is_dir()

    out = prune(tmp_path, max_bytes=2500, protected={("policy", "2")}, now_s=NOW)
    assert out["bytes_before"] == 3006 and out["bytes_after"] == 2004
    assert not old.exists() and held.is_dir() and new.is_dir()
    assert sorted(p.name for p in (tmp_path / "policy").iterdir()) == ["not-a-version", "v2", "v3"]


def test_scan_of_a_missing_cache_is_empty(tmp_path):
    assert scan(tmp_path / "nothing") == []


def test_a_versions_served_weights_are_cached_under_its_version_and_go_with_it(tmp_path):
    _cached(tmp_path, "policy", "1", 1000, NOW - 300)
    d = tmp_path / "policy" / "served-v1"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"x" * 500)
    os.utime(d, (NOW - 300, NOW - 300))
    assert sorted((e.path.name, e.version) for e in scan(tmp_path)) == [("served-v1", "1"), ("v1", "1")]
    assert prune(tmp_path, max_bytes=2000, protected={("policy", "1")}, now_s=NOW)["evicted"] == []
    prune(tmp_path, max_bytes=0, protected=set(), now_s=NOW)
    assert list((tmp_path / "policy").iterdir()) == []
