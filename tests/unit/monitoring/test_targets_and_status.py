"""What Prometheus scrapes (one job per process, from the configuration's addresses; TLS with its CA; the archiver
only with a metrics port), and `rtrl status` read from the cycle's metrics: the last cycle, its steps, the gate,
the monitors per arm and the lag, printed for a person."""

from __future__ import annotations

from datetime import datetime, timezone

from prometheus_client import generate_latest

from infra.config import load_config, render_overrides
from infra.monitoring.exporter import registry_for
from infra.monitoring.status import _ab, _cycle, _lag, render
from infra.monitoring.targets import scrape_config, targets
from infra.orchestrator.ledger import DONE, Ledger
from schemas.prometheus import parse_samples


def cfg_of(tmp_path, *extra):
    return load_config(None, [*render_overrides({"state_dir": tmp_path}), *extra])


def test_every_process_is_a_job_at_its_configured_address(tmp_path):
    cfg = cfg_of(tmp_path, 'serving.host="0.0.0.0"', "serving.port=28300", "collector.port=28080",
                 "archive.metrics_port=28390", "monitoring.port=28391", "monitoring.scrape_interval_s=5")
    jobs = {t.job: t for t in targets(cfg)}
    assert sorted(jobs) == ["rtrl-archiver", "rtrl-collector", "rtrl-cycle", "rtrl-serving"]
    assert jobs["rtrl-serving"].url == "http://127.0.0.1:28300/metrics"    # a wildcard bind is scraped on loopback
    conf = scrape_config(cfg)
    assert conf["global"] == {"scrape_interval": "5s", "scrape_timeout": "5s", "evaluation_interval": "5s"}
    assert {j["job_name"]: j["static_configs"][0]["targets"] for j in conf["scrape_configs"]}["rtrl-cycle"] == \
        ["127.0.0.1:28391"]
    assert conf["rule_files"][0].endswith("infra/monitoring/alerts.yml")


def test_an_archiver_without_a_metrics_port_is_not_scraped_and_tls_is_scraped_with_its_ca(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    cfg = cfg_of(tmp_path, "archive.metrics_port=0", f'serving.tls_cert_file="{cert}"',
                 f'serving.tls_key_file="{key}"')
    assert "rtrl-archiver" not in {t.job for t in targets(cfg)}
    serving = next(j for j in scrape_config(cfg, rules=None)["scrape_configs"] if j["job_name"] == "rtrl-serving")
    assert serving["scheme"] == "https" and serving["tls_config"] == {"ca_file": str(cert)}
    assert "rule_files" not in scrape_config(cfg, rules=None)


def test_status_reads_the_last_cycle_its_steps_gate_monitors_and_lag_from_the_metrics(tmp_path):
    cfg = cfg_of(tmp_path, "orchestrator.interval_s=3600")
    ledger = Ledger.for_config(cfg)
    rec = ledger.begin("c1", datetime(2026, 12, 1, tzinfo=timezone.utc), 1000.0)
    rec.steps["collect"] = {"status": DONE, "seconds": 3.0, "result": {"as_of": "2026-12-01T00:00:00+00:00"}}
    rec.steps["evaluate"] = {"status": DONE, "seconds": 9.0, "result": {"decision": "keep_champion"}}
    rec.steps["measure"] = {"status": DONE, "seconds": 1.0, "result": {
        "measured": True, "edit_persistence_rate": {"control": 0.3, "treatment": 0.35},
        "monitors": [{"metric": "broken_tool_call_rate", "control": 0.0, "treatment": 0.3, "change": 0.3,
                      "status": "red"}]}}
    rec.status, rec.finished_wall = DONE, 1100.0
    ledger.save(rec)
    s = parse_samples(generate_latest(registry_for(cfg)).decode())
    cycle = _cycle(s, now=1160.0)
    assert cycle["cycle"] == "c1" and cycle["status"] == "done" and cycle["since_last_done_s"] == 60.0
    assert cycle["steps"]["collect"] == {"state": "done", "seconds": 3.0} and cycle["cadence_s"] == 3600
    assert cycle["gate"] == {"decision": "keep_champion", "keeps_in_a_row": 1.0}
    ab = _ab(s)
    assert ab["monitors"]["broken_tool_call_rate"] == {"control": 0.0, "treatment": 0.3, "change": 0.3, "red": True}
    assert ab["rates"]["edit_persistence"] == {"control": 0.3, "treatment": 0.35}
    archiver = parse_samples('rtrl_archive_consumer_lag_records{topic="rtrl.trajectories"} 12\n'
                             "rtrl_archive_last_commit_timestamp_seconds 1150\n")
    lag = _lag(archiver, s, now=1160.0)
    assert lag["consumer_lag_records"] == {"rtrl.trajectories": 12} and lag["archive_last_commit_age_s"] == 10.0
    text = render({"processes": {"serving": {"job": "rtrl-serving", "url": "u", "running": True, "metrics": "up",
                                             "error": None},
                                 "archiver": {"job": "rtrl-archiver", "url": "a", "running": False,
                                              "metrics": "down", "error": "refused"}},
                   "arms": {"treatment": {"alias": "champion", "registry_version": "3", "serving_version": "3"}},
                   "registry_error": None, "cycle": cycle, "ab": ab, "lag": lag,
                   "alerts": {"source": "http://p", "error": None, "firing": [
                       {"alert": "RtrlBrokenToolCallsRising", "severity": "page", "summary": "broken calls"}]}})
    assert "serving      up" in text and "archiver     down" in text
    assert "treatment    alias champion -> v3; serving v3" in text
    assert "cycle: c1 done; last done 60s ago (cadence 60m)" in text
    assert "broken_tool_call_rate" in text and "RED" in text
    assert "RtrlBrokenToolCallsRising [page] broken calls" in text
