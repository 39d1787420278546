"""Per-event validation (each rejection names its field), request-level 400/415, Kafka down -> 503, health, and
no input crashing the server."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import CURRENT_VERSIONS
from tests.unit.collector.conftest import T0, fixture_event, valid_events


def _produced(h) -> list[dict]:
    return [json.loads(r.value) for r in h.transport.records]


def test_each_invalid_event_is_reported_by_index_with_its_field_and_only_valid_ones_are_produced(harness):
    good = valid_events(3)
    bad_fingerprint = fixture_event("edit_applied", hunks=[{"old_start": 1, "old_count": 1,
                                                             "new_fingerprints": ["not-hex"]}])
    bad_id = fixture_event("suggestion_shown", event_id="not-a-uuid")
    no_user = fixture_event("edit_rejected")
    del no_user["user_id"]
    events = [good[0], bad_fingerprint, good[1], bad_id, no_user, "a string", good[2]]
    r = harness.post({"events": events})
    assert r.status_code == 200
    answer = r.json()
    assert answer["accepted"] == 3
    by_index = {x["index"]: x for x in answer["rejected"]}
    assert sorted(by_index) == [1, 3, 4, 5]
    assert by_index[1]["field"] == "hunks.0.new_fingerprints.0"
    assert by_index[1]["event_id"] == bad_fingerprint["event_id"]
    assert (by_index[3]["field"], by_index[3]["event_id"]) == ("event_id", "not-a-uuid")
    assert by_index[4]["field"] == "user_id"
    assert (by_index[5]["field"], by_index[5]["event_id"]) == ("<event>", None)
    assert all(x["reason"] for x in answer["rejected"])
    assert harness.transport.event_ids == [e["event_id"] for e in good]


def test_unknown_event_type_and_future_schema_version_are_rejected(harness):
    unknown = fixture_event("edit_applied", event_type="keystroke")
    future = fixture_event("edit_applied", schema_version=99)
    r = harness.post({"events": [unknown, future]})
    fields = [x["field"] for x in r.json()["rejected"]]
    assert r.status_code == 200 and fields == ["event_type", "schema_version"]
    assert harness.transport.records == []


@pytest.mark.parametrize("version", [0, -1, -10**12])
def test_non_positive_schema_version_is_rejected_without_upgrading_step_by_step(harness, version):
    r = harness.post({"events": [fixture_event("edit_applied", schema_version=version)]})
    assert r.json()["rejected"][0]["field"] == "schema_version"
    assert harness.transport.records == []


@pytest.mark.parametrize("body", [
    b'{"events": [{"event_id": "\\ud800", "event_type": "edit_applied"}]}',
    b'{"events": [{"event_id": "e", "event_type": "\\udfff"}]}',
    b'{"events": [{"event_id": "e", "event_type": "edit_applied", "\\ud800": 1}]}',
])
def test_lone_surrogates_in_input_are_reported_not_crashing_the_answer(harness, body):
    r = harness.post(body)
    assert r.status_code == 200 and r.json()["accepted"] == 0 and len(r.json()["rejected"]) == 1
    assert harness.transport.records == []


def test_lone_surrogate_in_a_top_level_key_is_a_400(harness):
    r = harness.post(b'{"events": [], "\\ud800": 1}')
    assert r.status_code == 400 and r.json()["error"] == "invalid_shape"


def test_lone_surrogate_in_an_otherwise_valid_event_is_rejected(harness):
    e = json.dumps(fixture_event("edit_applied")).replace('"user_id": "u-1"', '"user_id": "\\udc00"')
    r = harness.post(('{"events": [%s]}' % e).encode())
    assert r.json()["rejected"][0]["field"] == "user_id"
    assert harness.transport.records == []


def test_privacy_mode_event_carrying_content_is_rejected(harness):
    leaky = fixture_event("followup_message", privacy_mode=True, text="my password is hunter2")
    clean = fixture_event("followup_message", privacy_mode=True, text="")
    r = harness.post({"events": [leaky, clean]})
    assert r.json()["accepted"] == 1
    [rej] = r.json()["rejected"]
    assert rej["index"] == 0 and "privacy_mode" in rej["reason"]
    assert b"hunter2" not in b"".join(rec.value for rec in harness.transport.records)


def test_valid_events_get_the_server_clock_as_received_time(harness):
    forged = fixture_event("edit_applied", received_time="2001-01-01T00:00:00Z")
    r = harness.post({"events": [forged, fixture_event("codebase_snapshot")]})
    assert r.json()["accepted"] == 2
    stamps = {e["received_time"] for e in _produced(harness)}
    assert stamps == {datetime.fromtimestamp(T0, timezone.utc).isoformat().replace("+00:00", "Z")}


def test_older_schema_versions_are_upgraded_before_produce(harness):
    v1 = fixture_event("trajectory", 1)
    r = harness.post({"events": [v1]})
    assert r.json() == {"accepted": 1, "rejected": []}
    [produced] = _produced(harness)
    assert produced["schema_version"] == CURRENT_VERSIONS["trajectory"] and produced["temperature"] == 1.0


def test_records_go_to_the_event_family_topic_keyed_by_user(harness):
    harness.post({"events": [fixture_event("edit_applied", user_id="u-9"), fixture_event("trajectory", 2)]})
    assert [(r.topic, r.key) for r in harness.transport.records] == [("telemetry.edits", b"u-9"),
                                                                     ("trajectories", b"u-1")]


def test_empty_batch_is_accepted_and_produces_nothing(harness):
    r = harness.post({"events": []})
    assert r.status_code == 200 and r.json() == {"accepted": 0, "rejected": []}
    assert harness.transport.batches == []


def test_batch_of_only_invalid_events_produces_nothing(harness):
    r = harness.post({"events": [{}, [], 3]})
    assert r.status_code == 200 and r.json()["accepted"] == 0 and len(r.json()["rejected"]) == 3
    assert harness.transport.batches == []


@pytest.mark.parametrize("body, code", [
    (b"{not json", "invalid_json"),
    (b"\xff\xfe\x00", "invalid_json"),
    (b'{"events": [NaN]}', "invalid_json"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid_json"),
    (b"[]", "invalid_shape"),
    (b'"events"', "invalid_shape"),
    (b'{"events": {"a": 1}}', "invalid_shape"),
    (b'{"event": []}', "invalid_shape"),
    (b'{"events": [], "extra": 1}', "invalid_shape"),
    (b"", "invalid_json"),
])
def test_malformed_body_is_400_with_a_reason(make_harness, body, code):
    h = make_harness(max_body_bytes=1024 * 1024)
    r = h.post(body)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == code and r.json()["message"]
    assert h.transport.records == []


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=latin-1", "application/jsonp"])
def test_wrong_content_type_is_415(harness, content_type):
    body = json.dumps({"events": valid_events(1)}).encode()
    headers = {**harness.bearer()}
    if content_type:
        headers["Content-Type"] = content_type
    r = harness.client.post("/v1/events", content=body, headers=headers)
    assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type"
    assert harness.transport.records == []


def test_json_content_type_with_utf8_charset_is_accepted(harness):
    r = harness.post({"events": valid_events(1)}, {"Content-Type": "Application/JSON; charset=UTF-8"})
    assert r.status_code == 200


def test_kafka_failure_is_503_with_retry_after_and_no_success_reported(harness):
    harness.transport.fail = True
    r = harness.post({"events": valid_events(3)})
    assert r.status_code == 503
    assert r.json()["error"] == "kafka_unavailable" and int(r.headers["Retry-After"]) >= 1
    assert harness.transport.records == []


def test_healthz_reports_kafka_reachability(harness):
    ok = harness.client.get("/healthz")
    harness.kafka["ok"] = False
    down = harness.client.get("/healthz")
    assert (ok.status_code, ok.json()) == (200, {"status": "ok", "kafka": True})
    assert (down.status_code, down.json()) == (503, {"status": "unavailable", "kafka": False})
    assert int(down.headers["Retry-After"]) >= 1


def test_unknown_path_and_wrong_method_answer_json_errors(harness):
    missing = harness.client.get("/v2/nothing")
    wrong = harness.client.get("/v1/events")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "POST"


def test_transport_is_closed_when_the_app_shuts_down(make_harness):
    h = make_harness()
    h.client.__exit__(None, None, None)
    assert h.transport.closed


texts = st.text(max_size=20) | st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=30)
event_like = st.fixed_dictionaries(
    {"event_type": st.sampled_from(["edit_applied", "trajectory", "followup_message", "tool_call_result", "x"])},
    optional={"event_id": st.uuids().map(str) | texts, "schema_version": json_values,
              "event_time": st.text(max_size=30) | st.just("2026-01-01T00:00:00Z"), "user_id": json_values,
              "hunks": json_values, "privacy_mode": json_values, "text": json_values, "ok": json_values})




def _mutated(event: dict, key: str, value) -> dict:
    return {**event, key: value}


mutated_event = st.sampled_from(valid_events(7)).flatmap(
    lambda e: st.builds(_mutated, st.just(e), st.sampled_from(sorted(e)) | texts, json_values))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(json_values.map(json.dumps),
                      st.lists(json_values | event_like | mutated_event, max_size=8).map(
                          lambda es: json.dumps({"events": es})),
                      st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_no_input_crashes_the_server_or_produces_an_invalid_event(harness, body):
    r = harness.post(body.encode())
    assert r.status_code in (200, 400, 413)
    from schemas import parse_wire

    for rec in harness.transport.records:  # whatever got through is a valid event
        parse_wire(rec.value)


@pytest.mark.parametrize("body", [
    b"\xef\xbb\xbf" + json.dumps({"events": []}).encode(),                # UTF-8 with a byte-order mark
    json.dumps({"events": []}).encode("utf-16"),                          # UTF-16 (json.loads would take it)
    json.dumps({"events": []}).encode("utf-32-le"),
])
def test_a_body_that_is_not_plain_utf8_json_is_a_400(harness, body):
    r = harness.post(body)
    assert r.status_code == 400 and r.json()["error"] == "invalid_json", r.text
    assert harness.transport.records == []


@pytest.mark.parametrize("field,value", [("schema_version", True), ("schema_version", "1"), ("user_id", 7),
                                         ("hunks", [{"old_start": "3", "old_count": 1, "new_fingerprints": []}])])
def test_a_field_of_the_wrong_json_type_is_rejected_not_coerced(harness, field, value):
    e = fixture_event("edit_applied")
    e[field] = value
    r = harness.post({"events": [e]})
    assert r.status_code == 200 and r.json()["accepted"] == 0, r.json()
    assert r.json()["rejected"][0]["field"].split(".")[0] == field
    assert harness.transport.records == []
