"""compute_cycle_metrics end to end on demo rows: cumulative results from the store equal one computation over
every cycle's rows; as_of, other arms, SRM, breakdowns, monitors; the store's layout and order; the reports."""

from __future__ import annotations

import json
from datetime import timedelta

import polars as pl
import pytest

from pipelines.metrics.catalog import METRICS
from pipelines.metrics.config import AbConfig, MonitorThreshold
from pipelines.metrics.cycle import compute_cycle_metrics, scan_cycle
from pipelines.metrics.demo import T0, DemoSpec, Effects, demo_rows, write_demo_table
from pipelines.metrics.report import render, table_rows
from pipelines.metrics.result import CycleMetrics
from pipelines.metrics.store import MetricsStore

SPEC = DemoSpec(users=300)


@pytest.fixture(scope="module")
def cycles():
    return [demo_rows(6000, cycle=k, spec=SPEC) for k in range(3)]


def test_cumulative_equals_one_computation_over_all_rows(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    for k, rows in enumerate(cycles):
        res = compute_cycle_metrics(rows, f"c{k}", store=store)
        store.write(f"c{k}", res)
    last = store.read("c2")
    assert last.cumulative_cycles == ["c0", "c1", "c2"] and last.seq == 3
    together = compute_cycle_metrics(pl.concat(cycles), "all")
    for m in last.metrics:
        t = together.metric(m.metric)
        assert m.cum_control == pytest.approx(t.control, rel=1e-9)
        assert m.cum_treatment == pytest.approx(t.treatment, rel=1e-9)
        if m.cum_change is not None and m.metric.startswith("latency") is False:
            # same per-user sums -> same variance: the always-valid interval is the sequence around that estimate
            assert m.cum_change == pytest.approx(t.change, rel=1e-9)
    assert last.srm_cumulative["observed"] == together.srm["observed"]
    # the running-minimum p-value never rises
    ps = [store.read(c).metric("edit_persistence_rate").seq_p_value for c in ("c0", "c1", "c2")]
    assert ps[0] >= ps[1] >= ps[2]


def test_a_cycle_measured_under_older_metric_definitions_is_not_accumulated_until_computed_again(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    store.write("c0", compute_cycle_metrics(cycles[0], "c0", store=store))
    stored = tmp_path / "ab" / "cycles" / "c0" / "result.json"
    old = json.loads(stored.read_text())
    del old["settings"]["metric_definitions"]                   # as written before the definitions were numbered
    stored.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="'c0' was measured with A/B metric definitions 1"):
        compute_cycle_metrics(cycles[1], "c1", store=store)
    store.write("c0", compute_cycle_metrics(cycles[0], "c0", store=store))   # computed again: accumulates
    assert compute_cycle_metrics(cycles[1], "c1", store=store).cumulative_cycles == ["c0", "c1"]


def test_as_of_excludes_immature_rows_and_other_arms_are_counted(cycles):
    rows = cycles[0].with_columns(arm=pl.when(pl.col("request_id").str.ends_with("7")).then(pl.lit("canary"))
                                  .otherwise(pl.col("arm")))
    as_of = T0 + timedelta(hours=2)
    res = compute_cycle_metrics(rows, "c0", as_of=as_of)
    immature = rows.filter(pl.col("mature_time") > as_of).height
    assert res.counts["immature_rows_excluded"] == immature
    assert res.counts["rows_other_arms"] == {"canary": rows.filter(pl.col("arm") == "canary").height}
    expected_used = rows.filter((pl.col("mature_time") <= as_of) & (pl.col("arm") != "canary")).height
    assert res.counts["rows_used"] == expected_used
    assert res.as_of == as_of.isoformat()


def test_counts_srm_versions_and_breakdowns(cycles):
    rows = cycles[1]
    res = compute_cycle_metrics(rows, "c1")
    users = rows.group_by("arm").agg(pl.col("user_id").n_unique())
    assert res.srm["observed"] == dict(users.iter_rows())
    assert res.versions == {"control": ["1"], "treatment": ["3"]}
    unknown = rows.filter(pl.col("persistence_label") == "unknown").group_by("arm").len()
    assert res.counts["unknown_labels"] == dict(unknown.iter_rows())
    orgs = {o["org_id"] for o in res.by_org}
    assert orgs == set(rows["org_id"].unique())
    # an org's users add up to the arm's users
    per_org = [o for o in res.by_org if o["metric"] == "edit_rate"]
    assert sum(o["users_control"] for o in per_org) == res.counts["users_by_arm"]["control"]
    assert [v["arm"] for v in res.by_version] == ["control", "treatment"]


def test_effects_are_found_and_monitors_turn_red():
    spec = DemoSpec(users=1500, effects=Effects(persistence=0.0, dissatisfied=0.0, latency=-0.2, clarification=1.0))
    res = compute_cycle_metrics(demo_rows(60_000, cycle=0, spec=spec), "c0")
    lat = res.metric("latency_p50")
    assert lat.verdict == "better" and abs(lat.change + 0.2) < 1.5 * (lat.high - lat.low)   # within ~3 SE
    status = {m["metric"]: m["status"] for m in res.monitors}
    assert status["clarification_rate"] == "red" and status["edit_rate"] == "ok"
    cfg = AbConfig(monitors={"latency_p50": MonitorThreshold(max_decrease=0.05)})
    assert compute_cycle_metrics(demo_rows(20_000, cycle=0, spec=spec), "c0", config=cfg).monitors[0]["status"] == \
        "red"


def test_srm_flag_when_an_arm_loses_users(cycles):
    rows = cycles[0]
    lost = rows["user_id"].filter(rows["arm"] == "control").unique().sort()[:80]
    res = compute_cycle_metrics(rows.filter(~pl.col("user_id").is_in(lost.to_list())), "c0")
    assert res.srm["observed"]["control"] == rows.filter(pl.col("arm") == "control")["user_id"].n_unique() - 80
    assert res.srm["flagged"] and res.srm["p_value"] < 0.001


def test_store_layout_order_and_rewrite(cycles, tmp_path):
    store = MetricsStore.for_state_dir(tmp_path)
    for cid in ("b", "a", "c"):
        store.write(cid, compute_cycle_metrics(cycles[0], cid, store=store))
    assert store.cycles() == ["b", "a", "c"]                     # the order they were first stored
    assert (tmp_path / "ab" / "cycles" / "a" / "units.parquet").is_file()
    again = compute_cycle_metrics(cycles[1], "a", store=store)    # recompute "a": keeps its place, sees only "b"
    assert again.seq == 2 and again.cumulative_cycles == ["b", "a"]
    store.write("a", again)
    assert store.cycles() == ["b", "a", "c"]
    assert not [p for p in (tmp_path / "ab" / "cycles").iterdir() if p.name.startswith(".")]
    h = store.history()
    assert h.height == 3 * len(METRICS) and h.filter(pl.col("cycle_id") == "a")["seq"].unique().to_list() == [2]
    with pytest.raises(ValueError):
        store.write("../x", again)


def test_result_json_round_trip(cycles):
    res = compute_cycle_metrics(cycles[0], "c0")
    back = CycleMetrics.from_dict(json.loads(json.dumps(res.to_dict(), allow_nan=False)))
    assert back.to_dict() == res.to_dict()


def test_reports(cycles, tmp_path):
    rows = cycles[0].with_columns(org_id=pl.lit("<script>alert(1)</script>|x"))
    res = compute_cycle_metrics(rows, "c0")
    md, html, js = render(res, "md"), render(res, "html"), render(res, "json")
    assert "| Edit persistence |" in md and "<script>" not in md and "\\|x" in md
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert json.loads(js)["cycle_id"] == "c0"
    rows_ = table_rows(res)
    assert [r["metric"] for r in rows_][:4] == ["Edit persistence", "Dissatisfied follow-ups", "Latency p50",
                                               "Latency p95"]
    with pytest.raises(ValueError):
        render(res, "pdf")


def test_scan_cycle_reads_the_reward_job_layout(cycles, tmp_path):
    write_demo_table(tmp_path, "c7", cycles[0])
    lf = scan_cycle(tmp_path, "c7")
    assert lf.select(pl.len()).collect().item() == cycles[0].height
    with pytest.raises(FileNotFoundError):
        scan_cycle(tmp_path, "c8")


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match="latency_ms"):
        compute_cycle_metrics(pl.DataFrame({"arm": ["control"]}), "c0")
