"""Bad input is rejected with a message naming the field; privacy mode carries no content."""

import copy
import json
from pathlib import Path

import pytest

from schemas import EVENT_TYPES, SchemaError, parse_event, parse_wire
from schemas.wire import MAX_WIRE_BYTES

FIXTURES = Path(__file__).parents[3] / "schemas" / "fixtures"


def fixture(event_type: str, version: int | None = None) -> dict:
    version = version or EVENT_TYPES[event_type].SCHEMA_VERSION
    return json.loads((FIXTURES / event_type / f"v{version}.json").read_text())


@pytest.mark.parametrize("mutate, field, reason", [
    (lambda d: d.pop("user_id"), "user_id", "Field required"),
    (lambda d: d.update(event_id="not-a-uuid"), "event_id", "UUID"),
    (lambda d: d.update(event_time="2026-11-01T10:00:00"), "event_time", "timezone"),
    (lambda d: d.update(latency_ms=-1), "latency_ms", "greater than or equal to 0"),
    (lambda d: d.update(prompt_token_ids=[1, "x"]), "prompt_token_ids.1", "integer"),
    (lambda d: d.update(behaviour_logprobs=[0.5, -1.0]), "behaviour_logprobs.0", "less than or equal to 0"),
    (lambda d: d.update(behaviour_logprobs=[-1.0]), "<event>", "one log-prob per sampled token"),
    (lambda d: d.update(tool_calls=[{"name": "x", "status": "weird"}]), "tool_calls.0.status", "Input should be"),
    (lambda d: d.update(surprise=1), "surprise", "Extra inputs are not permitted"),
    (lambda d: d.update(schema_version=99), "schema_version", "newer than this reader knows"),
    (lambda d: d.update(top_p=0), "top_p", "greater than 0"),
])
def test_invalid_trajectory_is_rejected_naming_the_field(mutate, field, reason):
    d = fixture("trajectory")
    mutate(d)
    with pytest.raises(SchemaError) as err:
        parse_event(d)
    assert err.value.field == field
    assert reason in err.value.reason


def test_unknown_event_type_is_rejected_listing_known_types():
    with pytest.raises(SchemaError, match="unknown event type 'nope'") as err:
        parse_event({**fixture("edit_applied"), "event_type": "nope"})
    assert err.value.field == "event_type"


def test_event_type_that_does_not_match_its_body_is_rejected():
    d = fixture("edit_applied")
    d["event_type"] = "edit_rejected"
    with pytest.raises(SchemaError) as err:
        parse_event(d)
    assert err.value.field == "hunks"  # edit_rejected has no hunks


def test_bad_fingerprint_in_a_hunk_is_rejected():
    d = fixture("edit_applied")
    d["hunks"][0]["new_fingerprints"] = ["def secret(): pass"]
    with pytest.raises(SchemaError) as err:
        parse_event(d)
    assert err.value.field == "hunks.0.new_fingerprints.0"


def test_failed_tool_call_needs_an_error_kind():
    d = fixture("tool_call_result")
    d.update(ok=False, error_kind="none")
    with pytest.raises(SchemaError, match="error_kind"):
        parse_event(d)


@pytest.mark.parametrize("event_type", sorted(t for t, c in EVENT_TYPES.items() if c.CONTENT_FIELDS))
def test_privacy_mode_event_with_content_is_rejected(event_type):
    d = fixture(event_type)
    d["privacy_mode"] = True
    with pytest.raises(SchemaError, match="privacy_mode event must not carry content"):
        parse_event(d)


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_without_content_empties_every_content_field_and_stays_valid(event_type):
    e = parse_event(fixture(event_type)).without_content()
    assert e.privacy_mode is True
    for name in type(e).CONTENT_FIELDS:
        assert not getattr(e, name)
    assert parse_event(json.loads(e.model_dump_json())) == e


@pytest.mark.parametrize("data, reason", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b"\xff\xfe", "not valid JSON"),
    (b"{}", "missing or not a string"),
])
def test_malformed_wire_messages_are_rejected_with_a_reason(data, reason):
    with pytest.raises(SchemaError, match=reason):
        parse_wire(data)


def test_oversized_wire_message_is_rejected_before_parsing():
    with pytest.raises(SchemaError, match="exceeds"):
        parse_wire(b" " * (MAX_WIRE_BYTES + 1))


def test_fixture_is_not_mutated_by_parsing():
    d = fixture("trajectory", 1)
    before = copy.deepcopy(d)
    parse_event(d)
    assert d == before
