"""Size caps (whatever Content-Length says), batch cap and per-client rate limit: oversized or excess input is
refused before it reaches Kafka."""

from __future__ import annotations

import json

import pytest

from infra.bench.asgi import raw_post
from tests.unit.collector.conftest import ORG, valid_events


def _raw_call(app, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, dict, int]:
    """(status, JSON body, how many body chunks the app pulled) of a raw POST /v1/events."""
    reply = raw_post(app, "/v1/events", [(k.lower().encode(), v.encode()) for k, v in headers.items()], chunks)
    return reply.status, reply.json(), reply.chunks_pulled


def _big_body(n_bytes: int) -> bytes:
    """A well-formed batch of valid events, at least `n_bytes` long."""
    events = valid_events(1)
    while len(json.dumps({"events": events})) < n_bytes:
        events += valid_events(10)
    return json.dumps({"events": events}).encode()


def test_declared_content_length_over_the_cap_is_413_without_reading(make_harness):
    h = make_harness(max_body_bytes=4096)
    body = _big_body(8000)
    r = h.post(body)
    assert len(body) > 4096
    assert r.status_code == 413 and r.json()["error"] == "body_too_large"
    assert h.transport.records == []


def test_lying_content_length_does_not_let_a_big_body_through(make_harness):
    h = make_harness(max_body_bytes=4096)
    body = _big_body(20_000)
    chunks = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    headers = {"content-type": "application/json", "content-length": "100", **h.bearer()}
    status, answer, pulled = _raw_call(h.client.app, headers, chunks)
    assert status == 413 and answer["error"] == "body_too_large"
    assert pulled <= 5  # stopped reading once past 4096 bytes, not after all 20+ chunks
    assert h.transport.records == []


def test_body_without_content_length_is_capped_by_its_actual_size(make_harness):
    h = make_harness(max_body_bytes=4096)
    body = _big_body(20_000)
    chunks = [body[i:i + 1000] for i in range(0, len(body), 1000)]
    status, answer, pulled = _raw_call(h.client.app, {"content-type": "application/json", **h.bearer()}, chunks)
    assert status == 413 and pulled <= 5
    assert h.transport.records == []


def test_chunked_upload_over_the_cap_is_413(make_harness):
    h = make_harness(max_body_bytes=4096)
    body = _big_body(20_000)

    def chunked():
        for i in range(0, len(body), 1000):
            yield body[i:i + 1000]

    r = h.client.post("/v1/events", content=chunked(),
                      headers={"Content-Type": "application/json", **h.bearer()})
    assert r.status_code == 413
    assert h.transport.records == []


def test_small_chunked_upload_is_accepted(harness):
    body = json.dumps({"events": valid_events(3)}).encode()
    r = harness.client.post("/v1/events", content=iter([body[:10], body[10:]]),
                            headers={"Content-Type": "application/json", **harness.bearer()})
    assert r.status_code == 200 and r.json()["accepted"] == 3


@pytest.mark.parametrize("value", ["abc", "-5", "1e3"])
def test_malformed_content_length_is_400(harness, value):
    status, answer, _ = _raw_call(harness.client.app, {"content-type": "application/json", "content-length": value,
                                                        **harness.bearer()}, [b'{"events": []}'])
    assert status == 400 and answer["error"] == "invalid_content_length"


def test_more_events_than_the_batch_cap_is_413_and_nothing_is_produced(make_harness):
    h = make_harness(max_events_per_batch=10)
    r = h.post({"events": valid_events(11)})
    assert r.status_code == 413 and r.json()["error"] == "too_many_events"
    assert h.transport.records == []
    assert h.post({"events": valid_events(10)}).status_code == 200


def test_rate_limit_answers_429_with_retry_after_then_recovers(make_harness):
    h = make_harness(rate_limit_events_per_s=10, rate_limit_burst=20, max_events_per_batch=20)
    assert h.post({"events": valid_events(20)}).status_code == 200
    refused = valid_events(5)
    r = h.post({"events": refused})
    assert r.status_code == 429 and r.json()["error"] == "rate_limited"
    assert int(r.headers["Retry-After"]) == 1  # 5 events at 10/s
    assert not set(e["event_id"] for e in refused) & set(h.transport.event_ids)
    h.clock.advance(0.5)
    assert h.post({"events": refused}).status_code == 200
    assert len(h.transport.records) == 25


def test_rate_limit_is_per_client(make_harness):
    h = make_harness(rate_limit_events_per_s=10, rate_limit_burst=20, max_events_per_batch=20)
    ci_key = h.keys.create("ci", org=ORG, role="serving")
    h.clock.advance(2)
    assert h.post({"events": valid_events(20)}).status_code == 200
    assert h.post({"events": valid_events(1)}).status_code == 429
    assert h.post({"events": valid_events(20)}, h.bearer(ci_key)).status_code == 200


def test_events_of_a_batch_kafka_refused_are_not_charged_against_the_rate(make_harness):
    h = make_harness(rate_limit_events_per_s=10, rate_limit_burst=20, max_events_per_batch=20)
    h.transport.fail = True
    assert h.post({"events": valid_events(20)}).status_code == 503
    h.transport.fail = False
    assert h.post({"events": valid_events(20)}).status_code == 200


def test_burst_smaller_than_a_batch_is_a_config_error():
    from pydantic import ValidationError

    from instrumentation.collector.config import CollectorConfig

    with pytest.raises(ValidationError, match="rate_limit_burst"):
        CollectorConfig(rate_limit_burst=10, max_events_per_batch=100)
