"""The gateway's `GET /metrics` over fake engines: Prometheus text that parses, requests counted by route, status,
arm and version, latency and time-to-first-token histograms, tokens, the arms' versions, in-flight requests,
swaps and the telemetry client's counts, and no key needed to scrape."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from schemas.api_keys import KeyStore
from serving.app import create_app
from tests.prometheus_text import samples, value
from tests.unit.serving.test_gateway import chat, gateway


def scrape(client) -> dict[tuple[str, tuple], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


@pytest.fixture
def served():
    gw, events, loader = gateway()
    with TestClient(create_app(gw, poll=False)) as client:
        yield client, gw, events


def test_answered_and_refused_requests_are_counted_by_status_arm_and_version(served):
    client, gw, events = served
    bodies = [chat(client, user=f"user-{i}").json() for i in range(12)]
    assert chat(client, stream="yes").status_code == 400
    assert client.post("/v1/chat/completions", content=b"{x").status_code == 400
    m = scrape(client)
    route = "/v1/chat/completions"
    for arm, version in (("control", "1"), ("treatment", "2")):
        n = sum(b["arm"] == arm for b in bodies)
        assert n and value(m, "rtrl_serving_requests_total", route=route, status="200", arm=arm, version=version) == n
        assert value(m, "rtrl_serving_request_duration_seconds_count", arm=arm, stream="false") == n
        tokens = sum(b["usage"]["completion_tokens"] for b in bodies if b["arm"] == arm)
        assert value(m, "rtrl_serving_tokens_total", arm=arm, kind="completion") == tokens
        assert value(m, "rtrl_serving_tokens_total", arm=arm, kind="prompt") == \
            sum(b["usage"]["prompt_tokens"] for b in bodies if b["arm"] == arm)
    assert value(m, "rtrl_serving_requests_total", route=route, status="400", arm="", version="") == 2
    assert sum(v for (name, _), v in m.items() if name == "rtrl_serving_requests_total") == 14 == \
        gw.counts["served"] + gw.counts["rejected"]


def test_a_streamed_request_records_its_time_to_first_token_and_its_end(served):
    client, gw, events = served
    with client.stream("POST", "/v1/chat/completions", json={"model": "x", "user": "user-1", "stream": True,
                                                             "messages": [{"role": "user", "content": "hi"}]}) as r:
        assert r.status_code == 200
        text = "".join(r.iter_text())
    assert text.rstrip().endswith("[DONE]")
    m = scrape(client)
    arm, version = events[0].arm, events[0].policy_version
    assert value(m, "rtrl_serving_time_to_first_token_seconds_count", arm=arm) == 1
    assert value(m, "rtrl_serving_request_duration_seconds_count", arm=arm, stream="true") == 1
    assert value(m, "rtrl_serving_requests_total", route="/v1/chat/completions", status="200", arm=arm,
                 version=version) == 1
    assert value(m, "rtrl_serving_tokens_total", arm=arm, kind="completion") == len(events[0].completion_token_ids)


def test_the_live_state_shows_each_arms_version_readiness_and_nothing_in_flight_when_idle(served):
    client, gw, _ = served
    m = scrape(client)
    assert value(m, "rtrl_serving_ready") == 1
    assert value(m, "rtrl_serving_arm_info", arm="control", alias="control", version="1") == 1
    assert value(m, "rtrl_serving_arm_info", arm="treatment", alias="champion", version="2") == 1
    assert value(m, "rtrl_serving_requests_in_flight", version="1") == 0
    assert value(m, "rtrl_serving_swaps_total", mode="blue_green") == 0


def test_the_telemetry_clients_counts_are_exported_by_outcome():
    gw, _, _ = gateway()
    gw.telemetry_stats = lambda: {"sent": 7, "spooled": 2, "resent": 1, "sampled_out": 0, "dropped": {"too_large": 3},
                                  "queue_depth": 4, "spool_bytes": 512}
    with TestClient(create_app(gw, poll=False)) as client:
        m = scrape(client)
    assert value(m, "rtrl_serving_telemetry_events_total", outcome="sent") == 7
    assert value(m, "rtrl_serving_telemetry_events_total", outcome="dropped_too_large") == 3
    assert value(m, "rtrl_serving_telemetry_queue_depth") == 4 and value(m, "rtrl_serving_telemetry_spool_bytes") == 512


def test_metrics_are_scraped_without_a_key_where_chat_needs_one(tmp_path):
    gw, _, _ = gateway(require_key=True)
    with TestClient(create_app(gw, poll=False, keys=KeyStore(tmp_path / "keys.json"))) as client:
        assert chat(client).status_code == 401
        assert client.get("/metrics").status_code == 200
