"""The cycle's metrics read from a real ledger in a folder: the latest cycle's status, step times and states, its
failures in a row, the newest done cycle's reward rows and finish time, the gate's keeps in a row since the last
promote, and the newest A/B rates per arm."""

from __future__ import annotations

from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, generate_latest

from infra.orchestrator.ledger import DONE, FAILED, Ledger
from infra.orchestrator.metrics import CycleCollector
from tests.prometheus_text import samples, value

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


def scrape(ledger: Ledger) -> dict:
    registry = CollectorRegistry()
    registry.register(CycleCollector(ledger))
    return samples(generate_latest(registry).decode())


def cycle(ledger: Ledger, seq: int, decision: str, finished: float | None = None, rows: int = 100,
          rates: dict | None = None):
    rec = ledger.begin(f"c{seq}", T0, 1000.0 * seq)
    rec.steps["distill"] = {"status": DONE, "result": {"rows": rows, "late_events": 2, "duplicates_dropped": 1},
                            "seconds": 12.5}
    rec.steps["measure"] = {"status": DONE, "seconds": 0.5, "result": {
        "measured": True, "srm_flagged": False, "edit_persistence_rate": rates or {"control": 0.3, "treatment": 0.4},
        "dissatisfied_followup_rate": {"control": 0.5, "treatment": 0.45}}}
    rec.steps["evaluate"] = {"status": DONE, "result": {"decision": decision}, "seconds": 40.0}
    if finished is not None:
        rec.status, rec.finished_wall = DONE, finished
    ledger.save(rec)
    return rec


def test_an_empty_ledger_exports_nothing(tmp_path):
    assert scrape(Ledger(tmp_path)) == {}


def test_the_latest_and_the_newest_done_cycle_are_exported(tmp_path):
    ledger = Ledger(tmp_path)
    cycle(ledger, 1, "promote", finished=1500.0)
    cycle(ledger, 2, "keep_champion", finished=2500.0, rows=321)
    cycle(ledger, 3, "keep_champion", finished=3600.0, rows=400,
          rates={"control": 0.31, "treatment": 0.42})
    running = ledger.begin("c4", T0, 4000.0)
    running.steps["collect"] = {"status": DONE, "result": {}, "seconds": 20.0}
    running.current = {"step": "distill", "pid": 1, "since_wall": 4020.0}
    ledger.save(running)
    m = scrape(ledger)
    assert value(m, "rtrl_cycle_info", cycle="c4", status="running") == 1
    assert value(m, "rtrl_cycle_started_timestamp_seconds") == 4000.0
    assert value(m, "rtrl_cycle_last_done_timestamp_seconds") == 3600.0
    assert value(m, "rtrl_cycle_step_seconds", step="collect") == 20.0
    assert value(m, "rtrl_cycle_step_state", step="collect", state="done") == 1
    assert value(m, "rtrl_cycle_step_state", step="distill", state="running") == 1
    assert value(m, "rtrl_cycle_step_state", step="train", state="pending") == 1
    assert value(m, "rtrl_cycle_reward_rows") == 400 and value(m, "rtrl_cycle_reward_late_events") == 2
    assert value(m, "rtrl_gate_decision_info", decision="keep_champion") == 1
    assert value(m, "rtrl_gate_keeps_in_a_row") == 2                       # c3 and c2, then c1 promoted
    assert value(m, "rtrl_ab_rate", arm="treatment", metric="edit_persistence") == 0.42
    assert value(m, "rtrl_ab_rate", arm="control", metric="dissatisfied_followup") == 0.5
    assert value(m, "rtrl_ab_srm_flagged") == 0


def test_a_failing_cycle_shows_its_failed_step_and_its_failures_in_a_row(tmp_path):
    ledger = Ledger(tmp_path)
    cycle(ledger, 1, "promote", finished=1500.0)
    rec = ledger.begin("c2", T0, 2000.0)
    rec.status, rec.error = FAILED, "boom"
    rec.failures = [{"at": "t1", "step": "train", "error": "boom"}, {"at": "t2", "step": "train", "error": "boom"}]
    ledger.save(rec)
    m = scrape(ledger)
    assert value(m, "rtrl_cycle_info", cycle="c2", status="failed") == 1
    assert value(m, "rtrl_cycle_step_state", step="train", state="failed") == 1
    assert value(m, "rtrl_cycle_failures_in_a_row") == 2
    assert value(m, "rtrl_cycle_last_done_timestamp_seconds") == 1500.0
    assert value(m, "rtrl_gate_keeps_in_a_row") == 0


def test_monitors_aa_and_champions_are_exported_per_arm(tmp_path):
    ledger = Ledger(tmp_path)
    rec = cycle(ledger, 1, "promote", finished=1500.0)
    rec.steps["measure"]["result"].update(aa=True, aa_failed=True, monitors=[
        {"metric": "broken_tool_call_rate", "control": 0.01, "treatment": 0.2, "change": 0.19, "status": "red"},
        {"metric": "edit_rate", "control": 0.8, "treatment": 0.79, "change": -0.0125, "status": "ok"},
        {"metric": "clarification_rate", "control": None, "treatment": 0.1, "change": None, "status": "no data"}])
    rec.steps["deploy"] = {"status": DONE, "result": {"deployed": True, "arms": {"control": "1", "treatment": "3"}}}
    ledger.save(rec)
    m = scrape(ledger)
    assert value(m, "rtrl_ab_monitor_rate", arm="treatment", metric="broken_tool_call_rate") == 0.2
    assert value(m, "rtrl_ab_monitor_rate", arm="control", metric="edit_rate") == 0.8
    assert ("rtrl_ab_monitor_rate", (("arm", "control"), ("metric", "clarification_rate"))) not in m
    assert value(m, "rtrl_ab_monitor_change", metric="broken_tool_call_rate") == 0.19
    assert value(m, "rtrl_ab_monitor_red", metric="broken_tool_call_rate") == 1
    assert value(m, "rtrl_ab_monitor_red", metric="edit_rate") == 0
    assert value(m, "rtrl_ab_monitor_red", metric="clarification_rate") == 0
    assert value(m, "rtrl_ab_aa_cycle") == 1 and value(m, "rtrl_ab_aa_failed") == 1
    assert value(m, "rtrl_champion_info", arm="control", version="1") == 1
    assert value(m, "rtrl_champion_info", arm="treatment", version="3") == 1


def test_with_a_configuration_the_cadence_reward_time_disk_and_cache_are_exported(tmp_path):
    from infra.config import load_config, render_overrides

    cfg = load_config(None, [*render_overrides({"state_dir": tmp_path}), "orchestrator.interval_s=3600",
                             "retention.cache_max_bytes=5000"])
    ledger = Ledger.for_config(cfg)
    rec = cycle(ledger, 1, "promote", finished=1500.0)
    rec.steps["collect"] = {"status": DONE, "result": {"as_of": "2026-12-01T01:00:00+00:00"}}
    rec.steps["deploy"] = {"status": DONE, "result": {"deployed": True, "retention": {"cache_bytes": 4200}}}
    ledger.save(rec)
    registry = CollectorRegistry()
    registry.register(CycleCollector.for_config(cfg))
    m = samples(generate_latest(registry).decode())
    assert value(m, "rtrl_cycle_cadence_seconds") == 3600
    assert value(m, "rtrl_reward_as_of_timestamp_seconds") == T0.timestamp() + 3600
    assert 0 < value(m, "rtrl_disk_free_bytes") <= value(m, "rtrl_disk_size_bytes")
    assert value(m, "rtrl_registry_cache_bytes") == 4200 and value(m, "rtrl_registry_cache_max_bytes") == 5000


def test_the_measure_step_calls_a_cycle_aa_only_when_both_arms_served_the_same_versions():
    from infra.orchestrator.steps import excludes_zero, is_aa

    assert is_aa({"control": ["1"], "treatment": ["1"]}, "control", "treatment")
    assert not is_aa({"control": ["1"], "treatment": ["1", "2"]}, "control", "treatment")
    assert not is_aa({"control": [], "treatment": []}, "control", "treatment")
    assert excludes_zero({"low": 0.01, "high": 0.2}) and excludes_zero({"low": -0.3, "high": -0.1})
    assert not excludes_zero({"low": -0.01, "high": 0.2}) and not excludes_zero({"low": None, "high": 0.2})
