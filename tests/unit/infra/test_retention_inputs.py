"""What retention learns from serving and the ledger (infra.retention.run): every version label serving's /health
holds (arms, org champions, engines still draining, stages), the cycles in flight, and the deploy step's summary."""

from __future__ import annotations

from datetime import datetime, timezone

from infra.config import load_config
from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, Ledger
from infra.retention.run import after_deploy, brief, in_flight_cycles, serving_holds


def test_serving_holds_every_arm_org_engine_and_stage():
    status = {"arms": {"control": {"alias": "control", "version": "1"}, "treatment": {"alias": "champion",
                                                                                      "version": "7"},
                       "spare": {"alias": "canary", "version": None}},
              "orgs": {"champion@acme": "3@acme"},
              "engines": [{"version": "7"}, {"version": "6", "retiring": True}],
              "staged": ["8"]}
    assert serving_holds(status) == ["1", "3@acme", "6", "7", "8"]


def test_nothing_answering_holds_nothing():
    assert serving_holds(None) == [] and serving_holds({}) == []


def test_cycles_in_flight_are_those_neither_done_nor_blocked(tmp_path):
    cfg = load_config(None, [f"state_dir='{tmp_path}'"])
    ledger = Ledger.for_config(cfg)
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for cycle, status in [("c1", DONE), ("c2", BLOCKED), ("c3", FAILED), ("c4", "running")]:
        rec = ledger.begin(cycle, now, 0.0)
        rec.status = status
        ledger.save(rec)
    assert in_flight_cycles(cfg)({"c1", "c2", "c3", "c4", "c9", "not/an-id"}) == {"c3", "c4"}


def test_the_cycle_whose_deploy_runs_retention_is_not_in_flight_so_its_rejected_candidate_goes(tmp_path):
    cfg = load_config(None, [f"state_dir='{tmp_path}'"])
    ledger = Ledger.for_config(cfg)
    for cycle in ("c4", "c5"):
        ledger.begin(cycle, datetime(2026, 1, 1, tzinfo=timezone.utc), 0.0)   # both running
    assert in_flight_cycles(cfg, finishing="c5")({"c4", "c5"}) == {"c4"}


def test_the_deploy_steps_summary_keeps_counts_and_labels_not_the_plan():
    report = {"keep": 4, "wait": 1, "delete": 2, "gone": 3, "deleted": ["2", "5@acme"], "trimmed": ["7"],
              "failed": {},
              "restored": [], "lost": [], "plan": [{"version": "1"}], "seconds": 0.2,
              "cache": {"bytes_after": 10, "evicted": [{"model": "policy", "version": "2", "bytes": 5, "reason": "x"},
                                                       {"model": "policy", "version": None, "bytes": 1,
                                                        "reason": "y"}]}}
    out = brief(report)
    assert out == {"deleted": ["2", "5@acme"], "masters_deleted": ["7"], "failed": {}, "kept": 4, "waiting": 1, "gone": 3, "restored": [],
                   "lost": [], "cache_evicted": ["policy/v2"], "cache_bytes": 10, "seconds": 0.2}


def test_retention_off_does_nothing_after_deploy(tmp_path):
    cfg = load_config(None, [f"state_dir='{tmp_path}'", "retention.enabled=false"])
    assert after_deploy(cfg, print) is None
