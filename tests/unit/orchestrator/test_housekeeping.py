"""After a cycle ends: step logs of cycles older than the last `keep_cycles` are removed (failed and stuck
cycles keep theirs, as do folders that are not a cycle's), and logs over their bound are rotated; the reward table's
old windows, the A/B store's old frames, old gate and quality reports and the gates' least recently used cached
measurements go by their rules, never what a cycle in flight reads."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from infra.orchestrator.config import OrchestratorConfig
from infra.orchestrator.housekeeping import after_cycle, old_cycles, rotate_logs
from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, STUCK, CycleRecord, Ledger

NOW = datetime(2026, 11, 1, tzinfo=timezone.utc)


def rec(cid: str, seq: int, status: str = DONE) -> CycleRecord:
    return CycleRecord(cid, seq, NOW.isoformat(), 0.0, status=status)


def test_step_logs_of_finished_cycles_older_than_the_window_are_the_ones_removed():
    folders = {"c1": rec("c1", 1), "c2": rec("c2", 2, BLOCKED), "c3": rec("c3", 3, FAILED), "c4": rec("c4", 4, STUCK),
               "c5": rec("c5", 5), "c6": rec("c6", 6), "demo": None}
    assert old_cycles(folders, latest_seq=6, keep_cycles=2) == ["c1", "c2"]
    assert old_cycles(folders, latest_seq=6, keep_cycles=1) == ["c1", "c2", "c5"]
    assert old_cycles(folders, latest_seq=6, keep_cycles=20) == []


def test_after_a_cycle_old_step_logs_go_and_oversized_logs_rotate(tmp_path):
    cfg = SimpleNamespace(state_path=tmp_path, orchestrator=OrchestratorConfig(
        source="files", keep_cycles=2, log_max_bytes=4096, log_keep=1))
    ledger = Ledger(tmp_path)
    logs = tmp_path / "orchestrator" / "logs"
    for i in range(1, 5):
        ledger.save(rec(f"c{i}", i))
        (logs / f"c{i}").mkdir(parents=True)
        (logs / f"c{i}" / "train.log").write_text("step\n")
    (logs / "demo").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "serving.log").write_bytes(b"x" * 5000)
    (tmp_path / "orchestrator" / "cadence.jsonl").write_bytes(b"{}\n" * 2000)
    said = []
    out = after_cycle(cfg, ledger, ledger.load("c4"), said.append)
    assert {k: v for k, v in out.items() if k in ("carry_removed", "step_logs_removed", "logs_rotated")} == {
        "carry_removed": [], "step_logs_removed": ["c1", "c2"],
        "logs_rotated": ["logs/serving.log", "orchestrator/cadence.jsonl"]}
    assert sorted(p.name for p in logs.iterdir()) == ["c3", "c4", "demo"]
    assert (tmp_path / "logs" / "serving.log.1").stat().st_size == 5000
    assert any("step logs removed: c1, c2" in line for line in said)
    assert rotate_logs(cfg) == [], "within their bounds now"


def test_a_clean_up_that_fails_is_reported_and_the_rest_still_runs(tmp_path):
    cfg = SimpleNamespace(state_path=tmp_path, orchestrator=OrchestratorConfig())   # kafka source, no rewards root
    said = []
    out = after_cycle(cfg, Ledger(tmp_path), rec("c1", 1), said.append)
    assert "carry_removed" not in out and out["logs_rotated"] == []
    assert any(line.startswith("housekeeping: carry removed failed: AttributeError") for line in said)


def test_after_a_cycle_each_store_keeps_what_its_rule_says_and_what_a_cycle_in_flight_reads(tmp_path, monkeypatch):
    import os

    from pipelines.metrics.cycle import compute_cycle_metrics
    from pipelines.metrics.demo import demo_rows, write_demo_table
    from pipelines.metrics.store import MetricsStore
    from pipelines.rewards.spec import RewardSpec
    from tests.conftest import make_config

    keep = RewardSpec().outcome_keep_s()
    cfg = make_config(tmp_path, "orchestrator.source=files", f"rewards.retention_s={keep}",
                      "ab.keep_cycle_frames=2", "gate.keep_reports=1", "quality.keep_reports=1",
                      "gate.keep_cached_versions=1")
    ledger, table, store = Ledger(tmp_path), cfg.reward_table(), MetricsStore.for_state_dir(tmp_path)
    h = 3600
    for k in range(1, 8):          # c1..c6 done, five hours apart; c7 running (its collect step done)
        r = rec(f"c{k}", k, DONE if k < 7 else "running")
        r.steps["collect"] = {"status": DONE, "result": {
            "as_of": datetime.fromtimestamp(NOW.timestamp() + 5 * h * k, timezone.utc).isoformat(),
            "after": datetime.fromtimestamp(NOW.timestamp() + 5 * h * (k - 1), timezone.utc).isoformat()}}
        ledger.save(r)
        rows = demo_rows(150, cycle=k, full_schema=True)
        write_demo_table(table, f"c{k}", rows)
        (tmp_path / "rewards" / "dead_letter").mkdir(parents=True, exist_ok=True)
        rows.head(1).write_parquet(tmp_path / "rewards" / "dead_letter" / f"c{k}.parquet")
        store.write(f"c{k}", compute_cycle_metrics(rows, f"c{k}", config=cfg.ab, store=store))
        q = tmp_path / "quality" / f"c{k}"
        q.mkdir(parents=True)
        for name in ("report.json", "report.md", "report.html"):
            (q / name).write_text("{}")
        os.utime(q / "report.json", (NOW.timestamp() + k, NOW.timestamp() + k))
    os.utime(tmp_path / "quality" / "c7" / "report.json", (NOW.timestamp(), NOW.timestamp()))  # c7's is not newest
    gate = tmp_path / "gate" / "v7-vs-v6-20261101T070000Z"
    gate.mkdir(parents=True)
    (gate / "report.json").write_text("{}")
    (gate / "episodes.jsonl").write_text("{}")
    os.utime(gate / "report.json", (NOW.timestamp(), NOW.timestamp()))
    newer = tmp_path / "gate" / "v8-vs-v7-20261101T080000Z"
    newer.mkdir()
    (newer / "report.json").write_text("{}")
    units = tmp_path / "gate" / "users" / "units"
    units.mkdir(parents=True)
    (units / "old.parquet").write_bytes(b"x")
    os.utime(units / "old.parquet", (NOW.timestamp(), NOW.timestamp()))
    (units / "champion.parquet").write_bytes(b"x")
    monkeypatch.setattr("infra.retention.stores.aliased_versions", lambda cfg: {"6", "8"})
    said = []
    out = after_cycle(cfg, ledger, ledger.load("c6"), said.append)
    # c7 in flight reads back from its after (c6's cut, 30 h) by the chains' reach (8.9 h): cuts at 5..20 h go
    assert out["reward_windows_removed"] == ["c1", "c2", "c3", "c4"]
    assert sorted({p.name for p in table.glob("policy_version=*/window=*")}) == ["window=c5", "window=c6", "window=c7"]
    assert sorted(p.stem for p in (tmp_path / "rewards" / "dead_letter").iterdir()) == ["c5", "c6", "c7"]
    assert out["ab_frames_folded"] == ["c1", "c2", "c3", "c4", "c5"] and store.folded().count == 5
    assert all((tmp_path / "ab" / "cycles" / f"c{k}" / "result.json").is_file() for k in range(1, 8))
    assert out["reports_thinned"] == ["gate/v7-vs-v6-20261101T070000Z",
                                      *[f"quality/c{k}" for k in range(1, 6)]]        # c6 newest, c7 in flight
    assert sorted(p.name for p in (tmp_path / "quality" / "c7").iterdir()) == ["report.html", "report.json",
                                                                               "report.md"]
    assert out["gate_cache_evicted"] == ["gate/users/units/old.parquet"]
    assert not [line for line in said if "failed" in line], said
    again = after_cycle(cfg, ledger, ledger.load("c6"), said.append)
    assert not any(again[k] for k in ("reward_windows_removed", "ab_frames_folded", "reports_thinned",
                                      "gate_cache_evicted"))
