"""Every dashboard page under Streamlit's AppTest: the empty state, then a demo-like state dir (six cycles, two
arms, a reward-hacking treatment, reward-cycle manifests, quality and gate reports, an MLflow lineage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.dashboard import data
from infra.dashboard.demo_state import write_demo_state
from pipelines.metrics.report import table_rows
from pipelines.metrics.store import MetricsStore
from tests.conftest import make_config

APP = str(Path(__file__).resolve().parents[3] / "infra" / "dashboard" / "app.py")
PAGES = ("experiment", "trends", "monitors", "health", "lineage")


def _run(monkeypatch, state: Path, page: str, *overrides: str):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("RTRL_DASHBOARD_SET", json.dumps([f'state_dir="{state}"', *overrides]))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["page"] = page
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture(scope="module")
def demo_state(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    write_demo_state(state, cycles=6, rows_per_cycle=5000, users=300, hacking=True,
                     registry_cfg=make_config(state))
    return state


@pytest.mark.parametrize("page", PAGES)
def test_empty_state_points_to_the_demo(monkeypatch, tmp_path, page):
    at = _run(monkeypatch, tmp_path, page)
    texts = [i.value for i in at.info]
    if page == "lineage":
        assert any("MLflow" in t for t in texts) and any("No gate report" in t for t in texts)
    else:
        assert any("No data yet: run `rtrl demo`" in t for t in texts)


def test_experiment_page_shows_the_stored_table(monkeypatch, demo_state):
    at = _run(monkeypatch, demo_state, "experiment")
    latest = MetricsStore.for_state_dir(demo_state).latest()
    shown = at.table[0].value
    expected = table_rows(latest)
    assert list(shown.columns)[:5] == ["metric", "control", "treatment", "change", "95% interval"]
    assert shown.to_dict("records") == expected
    assert at.selectbox(key="cycle").value == latest.cycle_id
    assert _charts(at) == 2                          # the forest charts: the cycle's metrics, the default metric by org
    srm = latest.srm                                 # the SRM verdict: red when flagged, else green, with the counts
    verdicts = [(kind, e.value) for kind, shown in (("error", at.error), ("success", at.success)) for e in shown
                if e.value.startswith(("Sample-ratio mismatch", "Sample ratio ok"))]
    assert [kind for kind, _ in verdicts] == ["error" if srm.get("flagged") else "success"], verdicts
    assert f"users {srm['observed']}" in verdicts[0][1]
    at.selectbox(key="cycle").select("c2").run()
    assert at.table[0].value.to_dict("records") == table_rows(MetricsStore.for_state_dir(demo_state).read("c2"))


def test_older_cycles_load_on_demand(monkeypatch, demo_state):
    at = _run(monkeypatch, demo_state, "experiment", "dashboard.max_cycles=2")
    newest_first = MetricsStore.for_state_dir(demo_state).cycles()[::-1]
    assert at.selectbox(key="cycle").options == newest_first[:2]
    at.button(key="older").click().run()
    assert at.selectbox(key="cycle").options == newest_first[:4]


def _charts(at) -> int:
    return len(at.get("arrow_vega_lite_chart")) + len(at.get("vega_lite_chart"))


def test_trends_page_draws_two_charts_per_metric(monkeypatch, demo_state):
    at = _run(monkeypatch, demo_state, "trends")
    assert _charts(at) == 2 * len(at.multiselect(key="trend_metrics").value) == 6
    at.multiselect(key="trend_metrics").set_value(["tokens_per_response"]).run()
    assert _charts(at) == 2


def test_monitors_turn_red_for_the_hacking_treatment(monkeypatch, demo_state):
    at = _run(monkeypatch, demo_state, "monitors")
    red = " ".join(e.value for e in at.error)
    assert "Clarification rate" in red and "Tokens per response" in red
    assert any("Edit rate" in s.value for s in at.success)
    assert at.table[0].value["cycle"].tolist()[0] == "c4"          # the first red cycle


def test_health_page(monkeypatch, demo_state):
    at = _run(monkeypatch, demo_state, "health")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Reward-job lag (records)"] == f"{137 * 4:,}"
    cycles = data.reward_cycles(demo_state)
    assert metrics["Dead letters (last cycle)"] == f"{sum(cycles[-1]['dead_letters'].values()):,}"
    assert any("c2: FAILED" in e.value for e in at.error)          # the demo's failed quality run
    assert _charts(at) == 2


def test_lineage_page(monkeypatch, demo_state):
    at = _run(monkeypatch, demo_state, "lineage")
    assert len(at.get("graphviz_chart")) == 1
    versions = at.dataframe[0].value
    assert versions["version"].tolist() == [str(v) for v in range(1, 8)]
    assert set(versions["gate"]) >= {"promote", "keep_champion"}
    assert versions["run"].str.contains("/#/experiments/").all()
    assert "keep_champion" in at.table[0].value["decision"].tolist()
    orgs = {at.dataframe[i].value["org_suite"].tolist()[0]: at.dataframe[i].value for i in (1, 2)}
    assert set(orgs) == {"promote", "keep_champion"} and len(at.dataframe) == 3   # o0's and o1's adapter lineages
    assert orgs["keep_champion"]["gate_reasons"].tolist() == ["org o1's own suite: primary_inferior"]
    assert orgs["promote"]["over"].tolist() == [data.registry_lineage(
        make_config(demo_state), "http://ui").aliases["champion"]]
    shown = " ".join(m.value for m in at.markdown)
    assert "**o0**: champion v1@o0" in shown and "**o1**: champion none yet" in shown


def test_readers_tolerate_damaged_files(demo_state, tmp_path):
    (tmp_path / "rewards" / "cycles").mkdir(parents=True)
    (tmp_path / "rewards" / "cycles" / "bad.json").write_text("{not json")
    (tmp_path / "quality" / "x").mkdir(parents=True)
    (tmp_path / "quality" / "x" / "report.json").write_text("[]")
    assert data.reward_cycles(tmp_path) == [] and data.quality_runs(tmp_path) == []
    assert data.consumer_lag(tmp_path / "archive", data.reward_cycles(demo_state)) is None
    assert data.demo_state_hint(tmp_path) is None
