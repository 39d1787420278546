"""Bearer keys and HMAC-signed requests: who may send, and what a failure reveals (only missing vs invalid)."""

from __future__ import annotations

import json

import pytest

from instrumentation.collector.auth import INVALID, AuthError, NonceCache
from tests.unit.collector.conftest import ORG, valid_events


def _body(n=2) -> bytes:
    return json.dumps({"events": valid_events(n)}).encode()


def test_bearer_key_is_accepted_and_events_are_produced(harness):
    body = {"events": valid_events(3)}
    r = harness.post(body)
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 3, "rejected": []}
    assert harness.transport.event_ids == [e["event_id"] for e in body["events"]]


@pytest.mark.parametrize("authorization", ["Bearer rtrl_not-a-real-key", "Bearer ", "Basic d2ViOnNlY3JldA==",
                                           "rtrl_only-the-key"])
def test_invalid_bearer_is_401_and_nothing_is_produced(harness, authorization):
    r = harness.post(_body(), {"Authorization": authorization}, auth="none")
    assert r.status_code == 401
    assert r.json() == {"error": "unauthorized", "message": INVALID}
    assert harness.transport.records == []


def test_missing_credentials_is_401_saying_missing(harness):
    r = harness.post(_body(), auth="none")
    assert r.status_code == 401
    assert r.json()["message"].startswith("missing credentials")
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert harness.transport.records == []


def test_signed_request_is_accepted(harness):
    body = _body(2)
    r = harness.post(body, harness.signed(body), auth="none")
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 2
    assert len(harness.transport.records) == 2


def test_signature_over_another_body_is_rejected(harness):
    body, other = _body(1), _body(1)
    r = harness.post(body, harness.signed(other), auth="none")
    assert r.status_code == 401 and r.json()["message"] == INVALID
    assert harness.transport.records == []


def test_signature_made_with_another_key_is_rejected(harness):
    other_key = harness.keys.create("ci", org=ORG, role="serving")
    body = _body(1)
    r = harness.post(body, harness.signed(body, key=other_key), auth="none")  # signed as 'web' with ci's key
    assert r.status_code == 401 and r.json()["message"] == INVALID
    assert harness.transport.records == []


def test_unknown_client_and_bad_signature_get_the_same_answer(harness):
    body = _body(1)
    unknown = harness.post(body, harness.signed(body, client="nobody"), auth="none")
    bad_sig = harness.post(body, {**harness.signed(body), "X-Rtrl-Signature": "0" * 64}, auth="none")
    assert unknown.status_code == bad_sig.status_code == 401
    assert unknown.json() == bad_sig.json() == {"error": "unauthorized", "message": INVALID}


@pytest.mark.parametrize("offset_s", [-301, 301, -10_000])
def test_timestamp_outside_the_skew_window_is_rejected(harness, offset_s):
    body = _body(1)
    r = harness.post(body, harness.signed(body, ts=harness.clock.wall + offset_s), auth="none")
    assert r.status_code == 401 and r.json()["message"] == INVALID
    assert harness.transport.records == []


def test_timestamp_just_inside_the_skew_window_is_accepted(harness):
    body = _body(1)
    r = harness.post(body, harness.signed(body, ts=harness.clock.wall - 299), auth="none")
    assert r.status_code == 200, r.text


def test_replayed_nonce_is_409_and_not_produced_twice(harness):
    body = _body(2)
    headers = harness.signed(body, nonce="nonce-0001")
    first = harness.post(body, headers, auth="none")
    harness.clock.advance(5)
    replay = harness.post(body, headers, auth="none")
    assert first.status_code == 200
    assert replay.status_code == 409
    assert replay.json()["error"] == "replayed_request" and "nonce" in replay.json()["message"]
    assert len(harness.transport.records) == 2
    fresh = harness.post(body, harness.signed(body), auth="none")  # same body, new nonce: a legitimate retry
    assert fresh.status_code == 200


def test_same_nonce_from_different_clients_is_not_a_replay(harness):
    ci_key = harness.keys.create("ci", org=ORG, role="serving")
    body = _body(1)
    a = harness.post(body, harness.signed(body, nonce="shared-nonce"), auth="none")
    b = harness.post(body, harness.signed(body, client="ci", key=ci_key, nonce="shared-nonce"), auth="none")
    assert (a.status_code, b.status_code) == (200, 200)


def test_replay_after_the_window_is_refused_by_the_timestamp(harness):
    body = _body(1)
    headers = harness.signed(body)
    assert harness.post(body, headers, auth="none").status_code == 200
    harness.clock.advance(301)
    r = harness.post(body, headers, auth="none")
    assert r.status_code == 401
    assert len(harness.transport.records) == 1


def test_partial_signature_headers_are_missing_credentials(harness):
    body = _body(1)
    headers = harness.signed(body)
    del headers["X-Rtrl-Nonce"]
    r = harness.post(body, headers, auth="none")
    assert r.status_code == 401 and r.json()["message"].startswith("missing credentials")


def test_bearer_and_signature_together_are_rejected(harness):
    body = _body(1)
    r = harness.post(body, {**harness.bearer(), **harness.signed(body)}, auth="none")
    assert r.status_code == 401 and r.json()["message"] == INVALID
    assert harness.transport.records == []


@pytest.mark.parametrize("header, value", [("X-Rtrl-Timestamp", "12.5"), ("X-Rtrl-Timestamp", "-1"),
                                           ("X-Rtrl-Nonce", "short"), ("X-Rtrl-Nonce", "has space in it"),
                                           ("X-Rtrl-Signature", "xyz"), ("X-Rtrl-Client", "../etc")])
def test_malformed_signature_headers_are_invalid(harness, header, value):
    body = _body(1)
    r = harness.post(body, {**harness.signed(body), header: value}, auth="none")
    assert r.status_code == 401 and r.json()["message"] == INVALID


def test_unauthenticated_request_is_refused_before_its_body_is_checked(harness):
    r = harness.post(b"not json at all", {"Authorization": "Bearer wrong"}, auth="none")
    assert r.status_code == 401


def test_nonce_cache_forgets_pairs_once_their_window_has_passed():
    cache = NonceCache(window_s=300, max_entries=1000)
    for i in range(10):
        cache.add("web", f"nonce-{i:04d}", timestamp=1000, now=1000)
    assert len(cache) == 10
    cache.add("web", "nonce-late", timestamp=1301, now=1301)
    assert len(cache) == 1


def test_full_nonce_cache_refuses_instead_of_forgetting_a_live_nonce():
    cache = NonceCache(window_s=300, max_entries=1000)
    for i in range(1000):
        cache.add("web", f"nonce-{i:04d}", timestamp=1000, now=1000)
    with pytest.raises(AuthError) as err:
        cache.add("web", "nonce-new", timestamp=1000, now=1010)
    assert err.value.status == 429 and err.value.retry_after >= 1
    with pytest.raises(AuthError) as replay:
        cache.add("web", "nonce-0000", timestamp=1000, now=1010)
    assert replay.value.status == 409
