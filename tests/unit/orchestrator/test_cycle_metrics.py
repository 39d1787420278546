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
