"""The collector's `GET /metrics`: ingest answers by status, events accepted and rejected by reason, Kafka produce
errors, refusals (401, 429) and the ingest latency histogram, read back from a scrape that needs no key."""

from __future__ import annotations

from tests.prometheus_text import samples, value
from tests.unit.collector.conftest import fixture_event, valid_events


def scrape(h) -> dict:
    r = h.client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


def test_accepted_and_rejected_events_and_answers_are_counted(harness):
    bad = fixture_event("suggestion_shown", event_id="not-a-uuid")
    assert harness.post({"events": [*valid_events(3), bad]}).json()["accepted"] == 3
    assert harness.post({"events": valid_events(2)}).status_code == 200
    assert harness.post(b"{not json").status_code == 400
    m = scrape(harness)
    assert value(m, "rtrl_collector_events_accepted_total") == 5 == len(harness.transport.records)
    assert sum(v for (n, _), v in m.items() if n == "rtrl_collector_events_rejected_total") == 1
    assert value(m, "rtrl_collector_ingest_requests_total", status="200") == 2
    assert value(m, "rtrl_collector_ingest_requests_total", status="400") == 1
    assert value(m, "rtrl_collector_ingest_duration_seconds_count") == 3


def test_kafka_refusing_a_batch_is_a_produce_error_and_a_503(harness):
    harness.transport.fail = True
    assert harness.post({"events": valid_events(2)}).status_code == 503
    m = scrape(harness)
    assert value(m, "rtrl_collector_kafka_produce_errors_total") == 1
    assert value(m, "rtrl_collector_ingest_requests_total", status="503") == 1
    assert value(m, "rtrl_collector_events_accepted_total") == 0


def test_bad_credentials_count_as_auth_failures(harness):
    r = harness.post({"events": valid_events(1)}, headers={"Authorization": "Bearer rtrl_" + "x" * 43})
    assert r.status_code == 401
    m = scrape(harness)
    assert value(m, "rtrl_collector_auth_failures_total") == 1
    assert value(m, "rtrl_collector_ingest_requests_total", status="401") == 1
    assert value(m, "rtrl_collector_rate_limited_total", kind="events") == 0
