"""The trust boundary at the collector (docs/security.md): who may write what, and when, is decided by the server from
the API key and its own clock -- never by what the request asserts."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from schemas.api_keys import KeyStore
from tests.unit.collector.conftest import ORG, T0, fixture_event, iso, valid_events

DAY = 86400.0


def _produced(h) -> list[dict]:
    return [json.loads(r.value) for r in h.transport.records]


def _stats(h) -> dict:
    return h.client.app.collector.stats.snapshot()


# -- tenancy -------------------------------------------------------------------------------------------------------
def test_cross_org_event_is_rejected_with_a_reason_and_the_rest_of_the_batch_is_delivered(harness):
    own, foreign = fixture_event("edit_applied"), fixture_event("edit_applied", org_id="org-b")
    r = harness.post({"events": [own, foreign]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["accepted"] == 1
    [rej] = body["rejected"]
    assert (rej["index"], rej["event_id"], rej["field"]) == (1, foreign["event_id"], "org_id")
    assert "org-b" in rej["reason"] and ORG in rej["reason"]
    assert harness.transport.event_ids == [own["event_id"]]
    assert _stats(harness)["rejected.org_mismatch"] == 1


def test_a_gateway_key_for_any_org_writes_every_org(harness):
    key = harness.keys.create("gateway", org="*", role="client")
    harness.clock.advance(2)
    events = [fixture_event("edit_applied", org_id=o) for o in ("org-a", "org-b", "org-z")]
    r = harness.post({"events": events}, harness.bearer(key))
    assert r.json() == {"accepted": 3, "rejected": []}


def test_org_is_compared_exactly_not_by_prefix_or_case(harness):
    events = [fixture_event("edit_applied", org_id=o) for o in ("org-a2", "ORG-A", "org-", "org-a ")]
    r = harness.post({"events": events})
    assert r.json()["accepted"] == 0 and len(r.json()["rejected"]) == 4


# -- roles ---------------------------------------------------------------------------------------------------------
def test_client_role_trajectory_is_rejected_and_its_other_events_are_delivered(harness):
    key = harness.keys.create("editor", org=ORG, role="client")
    harness.clock.advance(2)
    traj, edit = fixture_event("trajectory", 2), fixture_event("edit_applied")
    r = harness.post({"events": [traj, edit]}, harness.bearer(key))
    body = r.json()
    assert body["accepted"] == 1 and harness.transport.event_ids == [edit["event_id"]]
    [rej] = body["rejected"]
    assert (rej["index"], rej["field"]) == (0, "event_type") and "serving" in rej["reason"]
    assert _stats(harness)["rejected.role_forbidden"] == 1


def test_admin_role_may_not_write_trajectories_either(harness):
    key = harness.keys.create("ops", org=ORG, role="admin")
    harness.clock.advance(2)
    r = harness.post({"events": [fixture_event("trajectory", 2)]}, harness.bearer(key))
    assert r.json()["accepted"] == 0 and r.json()["rejected"][0]["field"] == "event_type"


def test_serving_role_writes_trajectories(harness):
    traj = fixture_event("trajectory", 2)
    assert harness.post({"events": [traj]}).json() == {"accepted": 1, "rejected": []}


def test_signed_requests_get_the_same_org_and_role_checks(harness):
    key = harness.keys.create("editor", org=ORG, role="client")
    harness.clock.advance(2)
    body = json.dumps({"events": [fixture_event("trajectory", 2),
                                  fixture_event("edit_applied", org_id="org-b")]}).encode()
    r = harness.post(body, harness.signed(body, client="editor", key=key), auth="none")
    assert r.status_code == 200 and r.json()["accepted"] == 0
    assert [x["field"] for x in r.json()["rejected"]] == ["event_type", "org_id"]


# -- admin endpoint --------------------------------------------------------------------------------------------------
def test_stats_without_credentials_is_401(harness):
    r = harness.client.get("/v1/stats")
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"


def test_stats_with_a_client_or_serving_key_is_403(harness):
    client_key = harness.keys.create("editor", org=ORG, role="client")
    harness.clock.advance(2)
    for key in (client_key, harness.api_key):
        r = harness.client.get("/v1/stats", headers=harness.bearer(key))
        assert r.status_code == 403 and r.json()["error"] == "forbidden"


def test_stats_with_an_admin_key_reports_the_counters(harness):
    admin = harness.keys.create("ops", org=ORG, role="admin")
    harness.clock.advance(2)
    harness.post({"events": [fixture_event("edit_applied"), fixture_event("edit_applied", org_id="x")]})
    r = harness.client.get("/v1/stats", headers=harness.bearer(admin))
    assert r.status_code == 200, r.text
    counters = r.json()["counters"]
    assert counters["events_accepted"] == 1 and counters["rejected.org_mismatch"] == 1
    assert counters["requests"] == 1  # the admin's GET is not an ingest request


def test_stats_accepts_an_admin_signed_request_over_the_empty_body(harness):
    admin = harness.keys.create("ops", org=ORG, role="admin")
    harness.clock.advance(2)
    r = harness.client.get("/v1/stats", headers=harness.signed(b"", client="ops", key=admin))
    assert r.status_code == 200
    r = harness.client.get("/v1/stats", headers=harness.signed(b"", client="web"))  # serving role, signed
    assert r.status_code == 403


# -- keys made before orgs -------------------------------------------------------------------------------------------
def test_version_1_key_is_refused_with_403_saying_how_to_reissue_it(make_harness, tmp_path):
    h = make_harness()
    old_key = "rtrl_" + "k" * 43
    import hashlib

    h.keys.path.write_text(json.dumps({"version": 1, "clients": {
        "legacy": {"sha256": hashlib.sha256(old_key.encode()).hexdigest(), "created_at": "2026-10-01T00:00:00+00:00"}}}))
    h.clock.advance(2)
    r = h.post({"events": valid_events(1)}, h.bearer(old_key))
    assert r.status_code == 403 and r.json()["error"] == "key_without_org"
    assert "--keys-new legacy --org" in r.json()["message"]
    assert h.transport.records == []
    assert KeyStore(h.keys.path).get("legacy").role == "client"


# -- time --------------------------------------------------------------------------------------------------------
def test_event_dated_2099_is_rejected_and_counted(harness):
    future = fixture_event("trajectory", 2, event_time="2099-12-31T00:00:00Z")
    now = fixture_event("trajectory", 2)
    r = harness.post({"events": [future, now]})
    body = r.json()
    assert body["accepted"] == 1 and harness.transport.event_ids == [now["event_id"]]
    [rej] = body["rejected"]
    assert (rej["index"], rej["field"]) == (0, "event_time") and "after the collector's receipt time" in rej["reason"]
    assert _stats(harness)["rejected.event_time_future"] == 1


def test_future_skew_bound_is_the_configured_one(make_harness):
    h = make_harness(max_event_skew_future_s=60)
    ok = fixture_event("edit_applied", event_time=iso(T0 + 60))
    late = fixture_event("edit_applied", event_time=iso(T0 + 61))
    body = h.post({"events": [ok, late]}).json()
    assert body["accepted"] == 1 and [x["index"] for x in body["rejected"]] == [1]


def test_event_older_than_the_past_skew_is_rejected_and_counted(make_harness):
    h = make_harness(max_event_skew_past_s=DAY)
    ok = fixture_event("edit_applied", event_time=iso(T0 - DAY))
    old = fixture_event("edit_applied", event_time=iso(T0 - DAY - 1))
    body = h.post({"events": [ok, old]}).json()
    assert body["accepted"] == 1
    assert body["rejected"][0]["field"] == "event_time" and "before" in body["rejected"][0]["reason"]
    assert _stats(h)["rejected.event_time_past"] == 1


def test_received_time_is_the_server_clock_whatever_the_client_sent(harness):
    e = fixture_event("edit_applied", received_time="2099-01-01T00:00:00Z")
    harness.post({"events": [e]})
    [produced] = _produced(harness)
    assert produced["received_time"].startswith(iso(T0)[:19])


# -- server-side redaction ---------------------------------------------------------------------------------------------
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_secrets_in_free_text_are_redacted_by_the_collector_and_counted(harness):
    e = fixture_event("followup_message", text=f"it failed, my token is {SECRET} please fix")
    r = harness.post({"events": [e]})
    assert r.json()["accepted"] == 1
    [produced] = _produced(harness)
    assert SECRET not in produced["text"] and "[REDACTED:" in produced["text"]
    assert produced["text"].startswith("it failed, my token is ")
    assert produced["event_id"] == e["event_id"] and produced["org_id"] == ORG  # ids are not free text
    stats = _stats(harness)
    assert stats["secrets_redacted"] >= 1 and stats["events_redacted"] == 1


def test_text_without_secrets_reaches_kafka_unchanged(harness):
    e = fixture_event("followup_message", text="that is wrong, revert the change in utils.py")
    harness.post({"events": [e]})
    assert _produced(harness)[0]["text"] == e["text"]
    assert _stats(harness).get("secrets_redacted", 0) == 0


def test_redaction_can_be_turned_off_by_configuration(make_harness):
    h = make_harness(redact=False)
    h.post({"events": [fixture_event("followup_message", text=f"token {SECRET}")]})
    assert SECRET in _produced(h)[0]["text"]


# -- rate limits -------------------------------------------------------------------------------------------------------
def test_empty_batches_count_as_requests_and_are_rate_limited(make_harness):
    h = make_harness(rate_limit_requests_per_s=2, rate_limit_request_burst=3)
    codes = [h.post({"events": []}).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    assert _stats(h)["rate_limited.requests"] == 1
    h.clock.advance(0.5)  # one request's worth of tokens at 2/s
    assert h.post({"events": []}).status_code == 200


def test_failed_credentials_are_rate_limited_per_address_then_the_address_gets_429(make_harness):
    h = make_harness(rate_limit_unauthenticated_per_s=1, rate_limit_unauthenticated_burst=3)
    bad = {"Authorization": "Bearer rtrl_wrong"}
    codes = [h.post({"events": []}, bad, auth="none").status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]
    assert h.post({"events": valid_events(1)}).status_code == 429  # even a good key, from that address
    other = TestClient(h.client.app, client=("10.0.0.7", 40000))
    r = other.post("/v1/events", json={"events": valid_events(1)}, headers=h.bearer())
    assert r.status_code == 200  # another address is not affected
    h.clock.advance(1.0)
    assert h.post({"events": valid_events(1)}).status_code == 200
    assert h.transport.records and _stats(h)["auth_failures"] == 3


def test_unauthenticated_endpoints_are_rate_limited_per_address(make_harness):
    h = make_harness(rate_limit_unauthenticated_per_s=1, rate_limit_unauthenticated_burst=2)
    codes = [h.client.get(p).status_code for p in ("/healthz", "/openapi.json", "/healthz")]
    assert codes == [200, 200, 429]
    assert _stats(h)["rate_limited.unauthenticated"] == 1


def test_successful_requests_do_not_spend_the_unauthenticated_budget(make_harness):
    h = make_harness(rate_limit_unauthenticated_per_s=1, rate_limit_unauthenticated_burst=1)
    assert all(h.post({"events": valid_events(1)}).status_code == 200 for _ in range(5))


# -- header limits -------------------------------------------------------------------------------------------------------
def test_too_many_headers_is_431_and_nothing_is_produced(make_harness):
    h = make_harness(max_headers=16)
    extra = {f"x-pad-{i}": "1" for i in range(20)}
    r = h.post({"events": valid_events(1)}, extra)
    assert r.status_code == 431 and r.json()["error"] == "headers_too_large"
    assert h.transport.records == [] and _stats(h)["headers_refused"] == 1


def test_headers_over_the_byte_limit_are_431(make_harness):
    h = make_harness(max_header_bytes=2048)
    r = h.post({"events": valid_events(1)}, {"x-pad": "a" * 3000})
    assert r.status_code == 431
    assert h.post({"events": valid_events(1)}, {"x-pad": "a" * 1000}).status_code == 200
