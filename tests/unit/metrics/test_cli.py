"""`rtrl ab compute` / `rtrl ab report` through the CLI, and what `rtrl dashboard` runs (bound to 127.0.0.1)."""

from __future__ import annotations

import json

from infra.cli import main
from infra.commands.dashboard import app_env, streamlit_argv
from infra.config import load_config
from pipelines.metrics.demo import DemoSpec, demo_rows, write_demo_table


def _state(tmp_path):
    return ["--set", f'state_dir="{tmp_path}"']


def test_ab_compute_then_report(tmp_path, capsys):
    table = tmp_path / "rewards" / "table"
    for k in range(2):
        write_demo_table(table, f"c{k}", demo_rows(4000, cycle=k, spec=DemoSpec(users=200)))
    (tmp_path / "rewards" / "cycles").mkdir(parents=True)
    (tmp_path / "rewards" / "cycles" / "c1.json").write_text(json.dumps({"cycle_id": "c1",
                                                                         "as_of": "2026-11-01T08:00:00+00:00"}))
    assert main([*_state(tmp_path), "ab", "compute", "--cycle", "c0"]) == 0
    assert main([*_state(tmp_path), "ab", "compute", "--cycle", "c1"]) == 0
    out = capsys.readouterr().out
    second = json.loads(out[out.rindex('{\n  "ab"'):])["ab"]
    assert second["seq"] == 2 and set(second["metrics"]) >= {"edit_persistence_rate", "latency_p95"}
    assert (tmp_path / "ab" / "cycles" / "c1" / "result.json").is_file()
    stored = json.loads((tmp_path / "ab" / "cycles" / "c1" / "result.json").read_text())
    assert stored["as_of"] == "2026-11-01T08:00:00+00:00"              # from the reward cycle manifest
    assert stored["counts"]["immature_rows_excluded"] > 0

    assert main([*_state(tmp_path), "ab", "report", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["cycle_id"] == "c1"     # default: the latest cycle
    assert main([*_state(tmp_path), "ab", "report", "--cycle", "c0", "--format", "md"]) == 0
    assert "# A/B report: cycle c0" in capsys.readouterr().out
    out_file = tmp_path / "r.html"
    assert main([*_state(tmp_path), "ab", "report", "--cycle", "c0", "--format", "html", "--out",
                 str(out_file)]) == 0
    assert out_file.read_text().startswith("<!doctype html>")


def test_ab_errors_are_usage_errors(tmp_path, capsys):
    assert main([*_state(tmp_path), "ab", "report"]) == 2
    assert "rtrl demo" in capsys.readouterr().err
    assert main([*_state(tmp_path), "ab", "report", "--cycle", "nope"]) == 2
    assert main([*_state(tmp_path), "ab", "compute", "--cycle", "c9"]) == 2
    assert "no reward rows" in capsys.readouterr().err


def test_dashboard_binds_to_localhost_with_the_configured_port(tmp_path):
    cfg = load_config(None, [f'state_dir="{tmp_path}"'])
    assert cfg.dashboard.host == "127.0.0.1"
    argv = streamlit_argv(cfg.dashboard.host, cfg.dashboard.port)
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"
    assert argv[argv.index("--server.port") + 1] == str(cfg.dashboard.port)
    assert argv[argv.index("--browser.gatherUsageStats") + 1] == "false"
    env = app_env(None, ["state_dir=/x"])
    assert env["RTRL_DASHBOARD_CONFIG"] == "" and json.loads(env["RTRL_DASHBOARD_SET"]) == ["state_dir=/x"]
