"""CollectorTransport: the Transport protocol over HTTP, and the error contract the SDK's spool relies on."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from instrumentation.collector_client import CollectorRejected, CollectorTransport, CollectorUnavailable
from instrumentation.transport import Record, TransportError
from schemas import parse_event
from tests.unit.collector.conftest import fixture_event, iso, valid_events


def _records(events: list[dict]) -> list[Record]:
    return [Record.of(parse_event(e)) for e in events]


def _now_events(n: int) -> list[dict]:
    """Valid events stamped now: the bridged app runs on the real clock, which judges event_time skew."""
    return valid_events(n, at=time.time())


def _bridge(harness) -> httpx.MockTransport:
    """Route the client's requests into the ASGI app under test (whose wall clock is set to the real one, since
    the client signs with the real time)."""
    harness.clock.wall = time.time()

    def handle(request: httpx.Request) -> httpx.Response:
        r = harness.client.request(request.method, request.url.path, content=request.read(),
                                   headers=dict(request.headers))
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)
    return httpx.MockTransport(handle)


def _canned(status: int, body: dict | None = None, headers: dict | None = None, calls: list | None = None):
    def handle(request: httpx.Request) -> httpx.Response:
        if calls is not None:
            calls.append(json.loads(request.read()))
        return httpx.Response(status, json=body or {}, headers=headers or {})
    return httpx.MockTransport(handle)


@pytest.mark.parametrize("sign", [False, True])
def test_send_delivers_every_record(harness, sign):
    events = _now_events(5)
    t = CollectorTransport("http://collector", harness.api_key, client_id="web", sign=sign, transport=_bridge(harness))
    t.send(_records(events))
    assert harness.transport.event_ids == [e["event_id"] for e in events]
    assert t.rejected_total == 0
    t.close()


def test_signed_requests_use_a_new_nonce_each_time(harness):
    t = CollectorTransport("http://collector", harness.api_key, client_id="web", sign=True, transport=_bridge(harness))
    batch = _records(_now_events(2))
    t.send(batch)
    t.send(batch)  # a retry of the same batch is not a replay
    assert len(harness.transport.records) == 4


def test_signing_without_a_client_id_is_refused():
    with pytest.raises(ValueError, match="client_id"):
        CollectorTransport("http://collector", "rtrl_x", sign=True)


def test_events_the_collector_rejects_are_counted_not_raised(harness):
    good = fixture_event("edit_applied", event_time=iso(time.time()))
    t = CollectorTransport("http://collector", harness.api_key, transport=_bridge(harness))
    bad = Record("telemetry.edits", b"u", json.dumps(fixture_event("edit_applied", user_id="", event_time=iso(time.time()))).encode())
    t.send([*_records([good]), bad])
    assert harness.transport.event_ids == [good["event_id"]]
    assert t.rejected_total == 1 and t.last_rejected[0]["field"] == "user_id"


def test_wrong_key_raises_collector_rejected_with_details(harness):
    t = CollectorTransport("http://collector", "rtrl_wrong", transport=_bridge(harness))
    with pytest.raises(CollectorRejected) as err:
        t.send(_records(_now_events(1)))
    assert err.value.status == 401 and err.value.error == "unauthorized"
    assert isinstance(err.value, TransportError)


@pytest.mark.parametrize("status", [429, 408, 500, 502, 503])
def test_retryable_answers_raise_transport_error_not_rejected(status):
    t = CollectorTransport("http://collector", "rtrl_x",
                           transport=_canned(status, {"error": "e", "message": "m"}, {"Retry-After": "3"}))
    with pytest.raises(TransportError) as err:
        t.send(_records(_now_events(1)))
    assert isinstance(err.value, CollectorUnavailable) and not isinstance(err.value, CollectorRejected)
    assert err.value.status == status and err.value.retry_after_s == 3


def test_connection_error_raises_transport_error():
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    t = CollectorTransport("http://collector", "rtrl_x", transport=httpx.MockTransport(refuse))
    with pytest.raises(CollectorUnavailable, match="unreachable"):
        t.send(_records(_now_events(1)))


def test_real_closed_port_raises_transport_error():
    from tests.conftest import free_port

    t = CollectorTransport(f"http://127.0.0.1:{free_port()}", "rtrl_x", timeout_s=2)
    with pytest.raises(TransportError):
        t.send(_records(_now_events(1)))


def test_batch_over_the_collector_cap_is_split_and_fully_delivered(make_harness):
    h = make_harness(max_events_per_batch=4)
    events = _now_events(10)
    t = CollectorTransport("http://collector", h.api_key, transport=_bridge(h))
    t.send(_records(events))
    assert sorted(h.transport.event_ids) == sorted(e["event_id"] for e in events)
    assert all(len(b) <= 4 for b in h.transport.batches)


def test_single_event_too_large_is_rejected():
    t = CollectorTransport("http://collector", "rtrl_x", transport=_canned(413, {"error": "body_too_large",
                                                                               "message": "too big"}))
    with pytest.raises(CollectorRejected) as err:
        t.send(_records(_now_events(1)))
    assert err.value.status == 413


def test_body_is_the_records_events_in_order():
    calls: list = []
    events = _now_events(3)
    t = CollectorTransport("http://collector", "rtrl_x", transport=_canned(200, {"accepted": 3, "rejected": []},
                                                                          calls=calls))
    t.send(_records(events))
    t.send([])  # nothing to send: no request
    assert len(calls) == 1
    assert [e["event_id"] for e in calls[0]["events"]] == [e["event_id"] for e in events]
