"""Regressions found by `rtrl bench fuzz`: inputs that used to raise something other than SchemaError
(crashing the archiver on every restart, the reward job, or the collector with a 500) or that validated but could
not be stored or trained on. Each is now refused with the field and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.archive.batch import Batch
from pipelines.archive.dedupe import RecentIds
from pipelines.archive.deadletter import INVALID_FIELD, INVALID_JSON
from pipelines.archive.messages import SourceMessage
from schemas import SchemaError, parse_event, parse_wire, to_arrow
from schemas.events import MAX_INT64

FIXTURES = Path(__file__).parents[3] / "schemas" / "fixtures"


def fixture(kind: str, version: int = 1, **changes) -> dict:
    return {**json.loads((FIXTURES / kind / f"v{version}.json").read_text()), **changes}


def refused(data: bytes) -> SchemaError:
    with pytest.raises(SchemaError) as info:
        parse_wire(data)
    return info.value


@pytest.mark.parametrize("t", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"])
def test_event_time_whose_utc_instant_is_outside_years_1_to_9999_is_refused_not_an_overflow(t):
    e = refused(json.dumps(fixture("followup_message", event_time=t)).encode())
    assert e.field == "event_time" and "range" in e.reason
    with pytest.raises(SchemaError):
        parse_event(fixture("followup_message", event_time=t))


@pytest.mark.parametrize("field, value", [("prompt_tokens", MAX_INT64 + 1), ("completion_tokens", 10**30),
                                          ("top_k", MAX_INT64 + 1), ("prompt_token_ids", [MAX_INT64 + 1])])
def test_integers_past_int64_are_refused_because_parquet_cannot_store_them(field, value):
    e = refused(json.dumps(fixture("trajectory", 3, **{field: value})).encode())
    assert e.field.split(".")[0] == field


def test_the_largest_int64_still_validates_and_becomes_an_arrow_row():
    event = parse_wire(json.dumps(fixture("trajectory", 3, prompt_tokens=MAX_INT64, top_k=MAX_INT64)).encode())
    assert to_arrow([event], "trajectory").column("prompt_tokens").to_pylist() == [MAX_INT64]


@pytest.mark.parametrize("field, value", [("behaviour_logprobs", "[-1e999, -1e999]"), ("latency_ms", "1e999"),
                                          ("temperature", "1e999"), ("behaviour_logprobs", "[-Infinity, -0.5]"),
                                          ("latency_ms", "NaN")])
def test_infinite_or_nan_floats_are_refused_so_they_never_reach_importance_weights_or_latency(field, value):
    raw = json.dumps(fixture("trajectory", 3, **{field: "PLACEHOLDER"})).replace('"PLACEHOLDER"', value)
    assert refused(raw.encode()).field.split(".")[0] == field


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"a":' * 50_000,
                                  b'{"event_type": "followup_message", "schema_version": ' + b"1" * 5000 + b"}"])
def test_deep_nesting_and_integers_past_the_digit_limit_are_invalid_json_not_a_crash(data):
    e = refused(data)
    assert e.field == "<event>" and e.reason.startswith("not valid JSON")


def test_the_archiver_dead_letters_the_messages_that_used_to_crash_it_and_keeps_the_good_one():
    bad = [b"[" * 100_000, json.dumps(fixture("followup_message", event_time="9999-12-31T23:59:59-14:00")).encode(),
           json.dumps(fixture("trajectory", 3, prompt_tokens=10**30)).encode()]
    good = json.dumps(fixture("followup_message")).encode()
    batch = Batch(RecentIds(10))
    for i, v in enumerate([*bad, good]):
        batch.add(SourceMessage("telemetry.followups", 0, i, v))
    assert [d.reason for d in batch.dead_letters] == [INVALID_JSON, INVALID_FIELD, INVALID_FIELD]
    assert batch.events == 1
