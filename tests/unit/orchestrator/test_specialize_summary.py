"""What `rtrl demo --specialize` adds to its summary (infra/orchestrator/specialize_summary.py), over a reward table
written as the reward job lays it out: the per-org comparison starts at the first request an org's adapter served,
matches `by_org` on those rows, and says which orgs an adapter of their own served; no such request is said so."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest

from infra.config import load_config, overlay_overrides
from infra.orchestrator.demo import SPECIALIZE_CONFIG
from infra.orchestrator.ledger import CycleRecord
from infra.orchestrator.specialize_summary import long_loop_summary, render_specialization, specialization_summary
from pipelines.metrics.by_org import by_org
from pipelines.metrics.demo import DemoSpec, demo_rows, write_demo_table
from pipelines.metrics.rates import INPUT_COLUMNS, unit_stats
from tests.conftest import make_config


def _record(cycle: str) -> CycleRecord:
    rec = CycleRecord(cycle, 1, "2026-11-01T00:00:00+00:00", 0.0)
    rec.steps["measure"] = {"status": "done", "result": {"measured": True}}
    return rec


def _rows(adapted: set[str]) -> tuple[pl.DataFrame, object]:
    """Shared (treatment) and specialized arms, 4 orgs; from the middle on, the orgs in `adapted` get their
    adapter `1@<org>` on the specialized arm. (The rows, the middle's request time.)"""
    spec = DemoSpec(orgs=4, control_arm="treatment", treatment_arm="specialized", control_version="2")
    rows = demo_rows(4000, spec=spec, treatment_version="2").with_columns(
        org_id=pl.col("org_id").str.replace("org-", "o"))
    mid = rows["request_time"].min() + (rows["request_time"].max() - rows["request_time"].min()) / 2
    later = (pl.col("request_time") >= mid) & (pl.col("arm") == "specialized") & pl.col("org_id").is_in(adapted)
    return rows.with_columns(policy_version=pl.when(later).then(pl.lit("1@") + pl.col("org_id"))
                             .otherwise(pl.col("policy_version"))), mid


def test_the_per_org_comparison_starts_with_the_first_adapter_and_names_the_orgs_it_served(tmp_path):
    cfg = load_config(None, [*overlay_overrides(SPECIALIZE_CONFIG), f'state_dir="{tmp_path}"'])   # its three arms
    rows, mid = _rows({"o0", "o2"})
    write_demo_table(tmp_path / "rewards" / "table", "c1", rows)
    out = specialization_summary(cfg, [_record("c1")])
    first = rows.filter(pl.col("policy_version").str.contains("@", literal=True))["request_time"].min()
    assert out["ab_by_org_since"] == first.isoformat() and first >= mid and first - mid < timedelta(hours=1)
    expected = by_org(unit_stats(rows.lazy().filter(pl.col("request_time") >= first).select(INPUT_COLUMNS))
                      .collect(), "edit_persistence_rate", base="treatment", arm="specialized")
    for org in ("o0", "o1", "o2", "o3"):
        assert out["ab_by_org"][org]["diff"] == pytest.approx(expected["orgs"][org]["diff"])
    assert out["ab_by_org_pooled"]["diff"] == pytest.approx(expected["pooled"]["diff"])
    assert out["orgs_specialized"] == ["o0", "o2"]
    only = by_org(unit_stats(rows.lazy().filter((pl.col("request_time") >= first) & pl.col("org_id").is_in(
        ["o0", "o2"])).select(INPUT_COLUMNS)).collect(), "edit_persistence_rate", base="treatment", arm="specialized")
    pooled = out["ab_by_org_pooled_specialized"]
    assert pooled["orgs"] == 2 and pooled["diff"] == pytest.approx(only["pooled"]["diff"])
    assert abs(pooled["diff"] - out["ab_by_org_pooled"]["diff"]) > 1e-6     # the orgs without an adapter left out
    assert out["orgs_won_specialized"] == sum(out["ab_by_org"][o]["diff"] > 0 for o in ("o0", "o2"))
    assert [out["ab_by_org"][o]["versions"] for o in ("o0", "o1")] == [["1@o0"], []]
    assert out["ab_by_org"]["o0"]["srm_flagged"] is False and out["ab_by_org"]["o0"]["seq_low"] is not None
    lines = render_specialization(out)
    assert sum("(no adapter: shared on both)" in line for line in lines) == 2
    assert any("pooled over the 2 orgs an adapter served" in line for line in lines)
    assert "long_loop" not in out and not any("Background tasks" in line for line in lines)
    loop = long_loop_summary(cfg)["long_loop"]
    assert loop["tasks"] == {"control": 0, "treatment": 0}      # no background task in these rows


def test_a_summary_with_the_long_loop_alone_prints_it_without_a_per_org_section():
    from infra.orchestrator.summary import render_table

    loop = {"control": 0.2, "treatment": 0.3, "diff": 0.1, "ci_low": 0.02, "ci_high": 0.18,
            "tasks": {"control": 40, "treatment": 60}, "tasks_unknown": {"control": 1, "treatment": 2}}
    text = render_table({"cycles": [], "ab": {"reason": "none"}, "long_loop": loop})
    assert "Background tasks accepted: control 20.0%  treatment 30.0%  diff +10.0 pp  95% CI [+2.0, +18.0]" in text
    assert "by org" not in text


def test_no_adapter_served_is_said_so(tmp_path):
    rows, _ = _rows(set())
    write_demo_table(tmp_path / "rewards" / "table", "c1", rows)
    out = specialization_summary(make_config(tmp_path), [_record("c1")])     # no specialized arm configured
    assert out["ab_by_org_reason"] == "no request was served by an org's specialized version"
    assert "ab_by_org" not in out and out["specialized_cycles"] == []
