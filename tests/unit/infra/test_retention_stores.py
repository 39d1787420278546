"""Retention of report folders and per-checkpoint caches (infra/retention/stores.py): all but the newest N reports
keep only their report.json, never the report of a version an alias points to or of a cycle in flight; the caches
keep the N checkpoints used most recently, and a gate's reuse counts as a use."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from evals.episode_cache import EpisodeCache
from evals.records import Episode
from infra.retention.stores import (Report, evict, evict_cache, evict_gate_caches, gate_candidate, reports_in, thin,
                                    thin_gate_reports, thin_quality_reports)

T = 1_600_000_000.0      # in the past: a touch (now) is newer


def report(folder: Path, at: float, *extra: str) -> Path:
    folder.mkdir(parents=True)
    for name in ("report.json", "report.md", "report.html", *extra):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
    os.utime(folder / "report.json", (at, at))
    return folder


def test_all_but_the_newest_reports_are_thinned_less_the_protected_and_those_thinned_already():
    rs = [Report("a", T), Report("b", T + 1), Report("c", T + 2), Report("d", T + 3), Report("old", T - 9, True)]
    assert thin(rs, 2) == ["a", "b"]
    assert thin(rs, 2, protected={"a"}) == ["b"]
    assert thin(rs, 0) == [] and thin(rs, 10) == []
    assert evict([("x", T), ("y", T + 5), ("z", T + 1)], 2) == ["x"]
    assert evict([("x", T)], 0) == [] and evict([], 3) == []


def test_a_gate_folders_name_gives_its_candidate():
    assert gate_candidate("v3-vs-v2-20261101T050000Z") == "3"
    assert gate_candidate("v4@org-a-vs-v2@org-a-20261101T050000Z") == "4@org-a"
    assert gate_candidate("users") is None and gate_candidate("v3-vs-v2") is None


def test_old_gate_reports_keep_their_report_json_unless_an_alias_holds_their_candidate(tmp_path):
    gate = tmp_path / "gate"
    for k in range(2, 7):
        report(gate / f"v{k}-vs-v{k - 1}-20261101T0{k}0000Z", T + k, "episodes.jsonl", "org-suite/report.json",
               "org-suite/episodes.jsonl")
    (gate / "users" / "units").mkdir(parents=True)
    asked = []

    def aliased():
        asked.append(1)
        return {"3"}           # champion v3 (its gate's report stays whole)

    assert thin_gate_reports(tmp_path, 2, aliased) == ["v2-vs-v1-20261101T020000Z", "v4-vs-v3-20261101T040000Z"]
    assert sorted(p.name for p in (gate / "v2-vs-v1-20261101T020000Z").iterdir()) == ["org-suite", "report.json"]
    assert sorted(p.name for p in (gate / "v2-vs-v1-20261101T020000Z" / "org-suite").iterdir()) == ["report.json"]
    assert (gate / "v3-vs-v2-20261101T030000Z" / "episodes.jsonl").is_file()
    assert (gate / "v6-vs-v5-20261101T060000Z" / "episodes.jsonl").is_file() and (gate / "users" / "units").is_dir()
    assert sorted(r.name for r in reports_in(gate) if r.thinned) == ["v2-vs-v1-20261101T020000Z",
                                                                     "v4-vs-v3-20261101T040000Z"]
    asked.clear()
    assert thin_gate_reports(tmp_path, 2, aliased) == [] and asked == [1]   # v3's stays; the thinned are done
    assert thin_gate_reports(tmp_path, 10, aliased) == [] and asked == [1]  # nothing to thin: no registry asked

    def registry_down():
        raise ConnectionError("mlflow")

    report(gate / "v7-vs-v6-20261101T070000Z", T + 7, "episodes.jsonl")
    with pytest.raises(ConnectionError):      # which versions are held is unknown: nothing is thinned
        thin_gate_reports(tmp_path, 2, registry_down)
    assert (gate / "v5-vs-v4-20261101T050000Z" / "episodes.jsonl").is_file()


def test_old_quality_reports_keep_their_report_json_and_a_cycle_in_flight_keeps_all(tmp_path):
    q = tmp_path / "quality"
    for k in range(1, 6):
        report(q / f"c{k}", T + k)
    report(q / "20261101T000000Z", T + 9)          # `rtrl quality` by hand: the newest
    gone = thin_quality_reports(tmp_path, 2, lambda names: {"c2"} & names)
    assert gone == ["c1", "c3", "c4"]
    assert [p.name for p in (q / "c1").iterdir()] == ["report.json"]
    assert sorted(p.name for p in (q / "c2").iterdir()) == ["report.html", "report.json", "report.md"]
    assert thin_quality_reports(tmp_path, 0, lambda names: set()) == []


def test_the_gate_caches_keep_the_checkpoints_used_most_recently_and_a_reuse_counts(tmp_path):
    units = tmp_path / "gate" / "users" / "units"
    units.mkdir(parents=True)
    for i, name in enumerate(["a", "b", "c", "d"]):
        (units / f"{name}.parquet").write_bytes(b"x")
        os.utime(units / f"{name}.parquet", (T + i, T + i))
    (units / ".e.tmp").write_bytes(b"x")
    os.utime(units / "a.parquet", (T + 10, T + 10))        # the champion's, read by the last gate
    assert evict_cache(units, "*.parquet", 2) == ["b.parquet", "c.parquet"]
    assert sorted(p.name for p in units.iterdir()) == [".e.tmp", "a.parquet", "d.parquet"]

    suite = tmp_path / "eval-suites" / "default-n4-seed7"
    cache = EpisodeCache(suite / ".episode-cache", "k", ["t1"])
    for i, digest in enumerate(["anchor", "v2", "v3"]):
        cache.store(digest * 8, [Episode(task_id="t1", sample=0, arm="champion", policy_version=digest)])
        os.utime(cache.path(digest * 8), (T + i, T + i))
    assert cache.load("anchor" * 8, "anchor", 1) is not None    # every gate reads the anchor's: now the newest
    cfg = SimpleNamespace(state_path=tmp_path, gate=SimpleNamespace(tasks=SimpleNamespace(
        suite_dir="", suites_root="", org_suites_dir="")))
    gone = evict_gate_caches(cfg, 2)
    assert gone == [f"eval-suites/default-n4-seed7/.episode-cache/{cache.path('v2' * 8).name}"]
    assert cache.path("anchor" * 8).is_file() and cache.path("v3" * 8).is_file()


def test_older_gate_runs_in_mlflow_keep_their_report_json_and_lose_the_rest_unless_aliased(tmp_path, monkeypatch):
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    from infra.config import load_config
    from infra.retention.stores import THINNED_TAG, thin_gate_runs
    from registry.client import Registry

    for k in ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(k, raising=False)
    registry = Registry.from_config(load_config(None, [f'state_dir="{tmp_path / "state"}"']))
    exp = registry.experiment_id("rtrl-gate")
    report = tmp_path / "report"
    (report / "org" / "o0").mkdir(parents=True)
    for rel in ("report.json", "episodes.jsonl", "report.html", "org/o0/report.json", "org/o0/episodes.jsonl"):
        (report / rel).write_text("{}")
    runs = []
    for i, candidate in enumerate(("2", "3", "4", "5")):      # 5 is the newest
        run = registry.client.create_run(exp, start_time=1_700_000_000_000 + 1000 * i,
                                         tags={"candidate_version": candidate})
        registry.client.log_artifacts(run.info.run_id, str(report), "report")
        runs.append(run)

    def files(run) -> set[str]:
        repo = get_artifact_repository(run.info.artifact_uri)
        out, todo = set(), ["report"]
        while todo:
            for f in repo.list_artifacts(todo.pop()):
                (todo.append(f.path) if f.is_dir else out.add(f.path))
        return out

    thinned = thin_gate_runs(registry, "rtrl-gate", keep=2, aliased=lambda: {"2"})
    assert thinned == [runs[1].info.run_id]                  # 3: older than the newest two, and not aliased
    assert files(runs[1]) == {"report/report.json", "report/org/o0/report.json"}
    assert registry.client.get_run(runs[1].info.run_id).data.tags[THINNED_TAG] == "true"
    assert all(len(files(r)) == 5 for r in (runs[0], runs[2], runs[3]))    # aliased, and the newest two
    assert thin_gate_runs(registry, "rtrl-gate", keep=2, aliased=lambda: {"2"}) == []   # done once
    assert thin_gate_runs(registry, "no-such-experiment", keep=2, aliased=set) == []
