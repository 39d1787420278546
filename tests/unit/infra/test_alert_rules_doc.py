"""The alert rules agree with their runbook and their tests, read as files (promtool itself runs in
tests/integration/test_alert_rules.py):

- every alert in infra/monitoring/alerts.yml has a `severity` (page | ticket), a summary, a description and a
  `runbook` annotation pointing at its own `## <AlertName>` section of docs/alerts.md (mkdocs' anchor: the name in
  lower case), and every such section is an alert's;
- every alert has a firing case (an alert_rule_test with its name and non-empty exp_alerts) and a non-firing one
  (empty exp_alerts) in infra/monitoring/alerts_test.yml;
- every rtrl metric an expression (or an annotation's query) reads is a documented one;
- the reward-hacking monitors' alerts have no `for`: they fire at the first evaluation after the cycle's measure step.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).parents[3]
RULES = REPO / "infra" / "monitoring" / "alerts.yml"
RULE_TESTS = REPO / "infra" / "monitoring" / "alerts_test.yml"
RUNBOOK = REPO / "docs" / "alerts.md"
MONITORING_DOC = REPO / "docs" / "monitoring.md"
MKDOCS = REPO / "mkdocs.yml"

SEVERITIES = {"page", "ticket"}
METRIC = re.compile(r"rtrl_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# The alerts other parts of rtrl rely on (docs, `rtrl status`, the integration tests), with their severity.
REQUIRED = {
    "RtrlProcessDown": "page", "RtrlCycleOverdue": "page", "RtrlCycleStepFailing": "page", "RtrlRewardLag": "ticket",
    "RtrlConsumerLag": "ticket", "RtrlArchiveStalled": "page", "RtrlCollectorRejectionSpike": "ticket",
    "RtrlKafkaProduceErrors": "page", "RtrlServingErrorRate": "page", "RtrlServingLatencyHigh": "ticket",
    "RtrlServingNotReady": "page", "RtrlTelemetrySpooling": "ticket", "RtrlDiskNearFull": "page",
    "RtrlRegistryCacheNearLimit": "ticket", "RtrlEditRateFalling": "page", "RtrlBrokenToolCallsRising": "page",
    "RtrlClarificationsRising": "page", "RtrlResponseLengthShifted": "ticket", "RtrlGateKeepsChampion": "ticket",
    "RtrlABSampleRatioMismatch": "ticket", "RtrlAACheckFailed": "ticket",
}
MONITOR_ALERTS = {"RtrlEditRateFalling", "RtrlBrokenToolCallsRising", "RtrlClarificationsRising",
                  "RtrlResponseLengthShifted"}

# The metrics rtrl's processes export (serving, the collector, the archiver, the cycle's exporter `rtrl metrics`):
# the authoritative list, for names docs/monitoring.md's tables do not show yet.
METRICS = {
    # serving (job rtrl-serving)
    "rtrl_serving_requests_total", "rtrl_serving_request_duration_seconds",
    "rtrl_serving_time_to_first_token_seconds", "rtrl_serving_tokens_total", "rtrl_serving_ready",
    "rtrl_serving_arm_info", "rtrl_serving_requests_in_flight", "rtrl_serving_swaps_total",
    "rtrl_serving_telemetry_events_total", "rtrl_serving_telemetry_queue_depth", "rtrl_serving_telemetry_spool_bytes",
    # the collector (job rtrl-collector)
    "rtrl_collector_ingest_requests_total", "rtrl_collector_ingest_duration_seconds",
    "rtrl_collector_events_accepted_total", "rtrl_collector_events_rejected_total",
    "rtrl_collector_kafka_produce_errors_total", "rtrl_collector_auth_failures_total", "rtrl_collector_forbidden_total",
    "rtrl_collector_rate_limited_total", "rtrl_collector_headers_refused_total",
    "rtrl_collector_secrets_redacted_total", "rtrl_collector_producer_queued_batches",
    # the archiver (job rtrl-archiver)
    "rtrl_archive_messages_total", "rtrl_archive_events_written_total", "rtrl_archive_dead_letters_total",
    "rtrl_archive_poll_errors_total", "rtrl_archive_kafka_commit_errors_total", "rtrl_archive_maintenance_errors_total",
    "rtrl_archive_last_commit_timestamp_seconds", "rtrl_archive_consumer_lag_records",
    # the cycle's exporter (job rtrl-cycle)
    "rtrl_cycle_info", "rtrl_cycle_started_timestamp_seconds", "rtrl_cycle_last_done_timestamp_seconds",
    "rtrl_cycle_cadence_seconds", "rtrl_cycle_step_seconds", "rtrl_cycle_step_state", "rtrl_cycle_failures_in_a_row",
    "rtrl_cycle_reward_rows", "rtrl_cycle_reward_late_events", "rtrl_cycle_reward_duplicates_dropped",
    "rtrl_reward_as_of_timestamp_seconds", "rtrl_gate_decision_info", "rtrl_gate_keeps_in_a_row", "rtrl_ab_rate",
    "rtrl_ab_srm_flagged", "rtrl_ab_aa_cycle", "rtrl_ab_aa_failed", "rtrl_ab_monitor_rate", "rtrl_ab_monitor_change",
    "rtrl_ab_monitor_red", "rtrl_champion_info", "rtrl_disk_free_bytes", "rtrl_disk_size_bytes",
    "rtrl_registry_cache_bytes", "rtrl_registry_cache_max_bytes",
}


def load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def alerts() -> dict[str, dict]:
    out = {}
    for group in load(RULES)["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] not in out, f"alert {rule['alert']} is defined twice"
                out[rule["alert"]] = rule
    return out


ALERTS = alerts()
NAMES = sorted(ALERTS)


def runbook_sections() -> list[str]:
    return re.findall(r"^## (\S+)\s*$", RUNBOOK.read_text(encoding="utf-8"), re.M)


def rule_tests() -> dict[str, dict[str, list]]:
    """{alertname: {"firing": [exp_alerts, ...], "quiet": [[], ...]}} over every alert_rule_test."""
    cases: dict[str, dict[str, list]] = defaultdict(lambda: {"firing": [], "quiet": []})
    for test in load(RULE_TESTS)["tests"]:
        for case in test.get("alert_rule_test") or []:
            exp = case.get("exp_alerts") or []
            cases[case["alertname"]]["firing" if exp else "quiet"].append(exp)
    return cases


TESTS = rule_tests()


def metric_names(text: str) -> set[str]:
    return set(METRIC.findall(text))


def documented(name: str, doc_names: set[str]) -> bool:
    candidates = [name] + [name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)]
    return any(c in doc_names or c in METRICS for c in candidates)


def test_the_files_hold_rules_and_tests():
    assert {n: ALERTS[n]["labels"]["severity"] for n in REQUIRED if n in ALERTS} == REQUIRED
    assert all(name.startswith("Rtrl") for name in NAMES)
    assert TESTS, "alerts_test.yml has no alert_rule_test"
    rule_files = load(RULE_TESTS)["rule_files"]
    assert [(RULE_TESTS.parent / f).resolve() for f in rule_files] == [RULES.resolve()]


@pytest.mark.parametrize("name", NAMES)
def test_each_alert_has_a_severity_summary_description_and_its_runbook_link(name):
    rule = ALERTS[name]
    assert rule.get("labels", {}).get("severity") in SEVERITIES, f"{name}: severity must be one of {SEVERITIES}"
    ann = rule.get("annotations", {})
    assert ann.get("summary", "").strip() and ann.get("description", "").strip(), f"{name}: summary and description"
    assert ann.get("runbook") == f"docs/alerts.md#{name.lower()}", f"{name}: runbook annotation {ann.get('runbook')!r}"


def test_the_runbook_has_one_section_per_alert_and_no_other():
    sections = runbook_sections()
    assert len(sections) == len(set(sections)), "a section appears twice in docs/alerts.md"
    missing = sorted(set(NAMES) - set(sections))
    assert not missing, f"docs/alerts.md has no `## <name>` section for {missing}"
    stale = sorted(s for s in set(sections) - set(NAMES) if s.startswith("Rtrl"))
    assert not stale, f"docs/alerts.md has sections for alerts that do not exist: {stale}"


@pytest.mark.parametrize("name", NAMES)
def test_each_alert_has_a_firing_and_a_non_firing_case(name):
    cases = TESTS.get(name, {"firing": [], "quiet": []})
    assert cases["firing"], f"{name}: no alert_rule_test in alerts_test.yml where it fires (non-empty exp_alerts)"
    assert cases["quiet"], f"{name}: no alert_rule_test in alerts_test.yml where it does not fire (exp_alerts: [])"
    severity = ALERTS[name]["labels"]["severity"]
    for exp_alerts in cases["firing"]:
        for exp in exp_alerts:
            assert exp.get("exp_labels", {}).get("severity") == severity, f"{name}: a firing case's severity"


def test_the_tests_name_only_existing_alerts():
    unknown = sorted(set(TESTS) - set(ALERTS))
    assert not unknown, f"alerts_test.yml tests alerts alerts.yml does not define: {unknown}"


@pytest.mark.parametrize("name", NAMES)
def test_each_metric_an_alert_reads_is_documented(name):
    rule = ALERTS[name]
    if name != "RtrlProcessDown":  # reads Prometheus's own `up`
        assert metric_names(rule["expr"]), f"{name}: its expression reads no rtrl metric"
    doc_names = metric_names(MONITORING_DOC.read_text(encoding="utf-8"))
    read = metric_names(rule["expr"]) | metric_names(" ".join(rule.get("annotations", {}).values()))
    unknown = sorted(m for m in read if not documented(m, doc_names))
    assert not unknown, f"{name} reads metrics that neither docs/monitoring.md nor the known list has: {unknown}"


def test_the_metric_check_strips_histogram_suffixes_and_knows_no_made_up_name():
    assert documented("rtrl_serving_request_duration_seconds_bucket", set())
    assert documented("rtrl_new_metric", {"rtrl_new_metric"})
    assert not documented("rtrl_serving_request_duration_secs_bucket", set())
    assert metric_names('sum(rate(rtrl_a_total{job=~"rtrl-.*"}[5m])) / rtrl_b') == {"rtrl_a_total", "rtrl_b"}


@pytest.mark.parametrize("name", sorted(MONITOR_ALERTS))
def test_the_reward_hacking_alerts_fire_within_one_cycle(name):
    rule = ALERTS[name]
    assert rule.get("for") in (None, "0s", "0m"), f"{name} must have no `for` (one value per cycle already)"
    assert "rtrl_ab_monitor_red" in rule["expr"]


def test_the_runbook_is_in_the_site_nav_after_monitoring():
    pages = []

    def walk(entries):
        for e in entries:
            if isinstance(e, dict):
                for v in e.values():
                    walk(v) if isinstance(v, list) else pages.append(v)
            else:
                pages.append(e)

    walk(yaml.safe_load(MKDOCS.read_text(encoding="utf-8"))["nav"])
    assert "alerts.md" in pages, "docs/alerts.md is not in mkdocs.yml's nav"
    assert pages.index("alerts.md") == pages.index("monitoring.md") + 1
