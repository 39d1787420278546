"""The dashboard reads a bounded recent window of per-cycle files (infra/dashboard/data.py, MetricsStore.history):
the last N A/B results, reward-cycle manifests and gate reports, however many cycles are stored; the files before
the window are never opened (a damaged one there does not matter)."""

from __future__ import annotations

import json
import os

import pytest

from infra.dashboard import data
from pipelines.metrics.cycle import compute_cycle_metrics
from pipelines.metrics.demo import DemoSpec, demo_rows
from pipelines.metrics.store import MetricsStore


def _stamp(path, k: int) -> None:
    os.utime(path, ns=(k * 10**9, k * 10**9))      # written in order, one second apart


def test_history_reads_only_the_last_cycles(tmp_path):
    store = MetricsStore.for_state_dir(tmp_path)
    rows = demo_rows(800, cycle=0, spec=DemoSpec(users=60), full_schema=False)
    for k in range(4):
        store.write(f"c{k}", compute_cycle_metrics(rows, f"c{k}", store=store))
    (tmp_path / "ab" / "cycles" / "c0" / "result.json").write_text("{damaged")
    assert store.history(last=2)["cycle_id"].unique(maintain_order=True).to_list() == ["c2", "c3"]
    assert store.history(last=0).is_empty()
    assert store.cycles() == ["c0", "c1", "c2", "c3"]                # the order comes from the index
    with pytest.raises(ValueError):
        store.history()                                              # every cycle: the damaged one is read


def test_reward_cycles_reads_the_newest_manifests(tmp_path):
    d = tmp_path / "rewards" / "cycles"
    d.mkdir(parents=True)
    for k in range(5):
        p = d / f"c{k}.json"
        p.write_text(json.dumps({"cycle_id": f"c{k}", "seq": k + 1, "status": "done"}))
        _stamp(p, k)
    (d / "c0.json").write_text("{damaged")
    _stamp(d / "c0.json", 0)
    assert [c["cycle_id"] for c in data.reward_cycles(tmp_path, last=2)] == ["c3", "c4"]
    assert [c["cycle_id"] for c in data.reward_cycles(tmp_path)] == ["c1", "c2", "c3", "c4"]


def test_gate_and_quality_reports_read_the_newest(tmp_path):
    for k in range(4):
        g = tmp_path / "gate" / f"run{k}"
        g.mkdir(parents=True)
        (g / "report.json").write_text(json.dumps({"decision": "promote", "candidate_version": str(k + 2)}))
        _stamp(g / "report.json", k)
        q = tmp_path / "quality" / f"c{k}"
        q.mkdir(parents=True)
        (q / "report.json").write_text(json.dumps({"success": True, "suites": []}))
        _stamp(q / "report.json", k)
    assert [g["candidate"] for g in data.gate_reports(tmp_path, limit=2)] == ["5", "4"]
    assert len(data.gate_reports(tmp_path)) == 4
    assert [q["run"] for q in data.quality_runs(tmp_path, limit=3)] == ["c3", "c2", "c1"]
