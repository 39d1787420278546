"""ComputeRewards on Beam's DirectRunner in streaming mode, driven by TestStream: out-of-order, duplicate, late
and malformed events; rows equal the replay of the same events."""

from __future__ import annotations

import uuid
from datetime import timedelta

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream

from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.compute import ComputeRewards
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.parse import DEAD_LETTER, ParseEventsFn
from pipelines.rewards.spec import RewardSpec
from schemas import to_wire
from tests.unit.rewards.builders import T0, applied, at, followup, snapshot, tool_result, trajectory

pytestmark = pytest.mark.slow
SPEC = RewardSpec()
DELAY = SPEC.maturity_delay_s()


_COLLECTED: dict[str, list] = {}


def _collect(key: str, item) -> None:
    """Module-level, so Beam pickles it by reference and the in-process runner appends to this module's dict."""
    _COLLECTED.setdefault(key, []).append(item)


def run_stream(steps, spec=SPEC, with_outcomes: bool = False):
    """steps: list of ("events", [(event_or_raw, event_time_s)]) or ("watermark", seconds). Returns (rows, dead),
    and the outcome rows by request id as a third element `with_outcomes`."""
    ts = TestStream()
    for kind, value in steps:
        if kind == "events":
            ts = ts.add_elements([beam.window.TimestampedValue(to_wire(e) if hasattr(e, "event_id") else e,
                                                               (T0 + timedelta(seconds=t)).timestamp())
                                  for e, t in value])
        else:
            ts = ts.advance_watermark_to((T0 + timedelta(seconds=value)).timestamp())
    ts = ts.advance_watermark_to_infinity()
    run_id = str(uuid.uuid4())
    opts = PipelineOptions()
    opts.view_as(StandardOptions).streaming = True
    with beam.Pipeline(options=opts) as p:
        parsed = p | ts | beam.ParDo(ParseEventsFn()).with_outputs(DEAD_LETTER, main="events")
        rows, _carry, outcomes = parsed.events | ComputeRewards(spec, shards=4)
        _ = rows | "CollectRows" >> beam.FlatMap(lambda f: f.to_dicts()) | beam.Map(lambda r: _collect(run_id + "r", r))
        _ = (outcomes | "CollectOutcomes" >> beam.FlatMap(lambda f: f.to_dicts())
             | "KeepOutcomes" >> beam.Map(lambda r: _collect(run_id + "o", r)))
        _ = parsed[DEAD_LETTER] | "CollectDead" >> beam.Map(lambda d: _collect(run_id + "d", d))
    got = _COLLECTED.pop(run_id + "r", [])
    rows = {r["request_id"]: r for r in got}
    assert len(rows) == len(got), "a request_id was emitted twice"
    got_outcomes = _COLLECTED.pop(run_id + "o", [])
    outcome_rows = {r["request_id"]: r for r in got_outcomes}
    assert len(outcome_rows) == len(got_outcomes), "an outcome row was emitted twice"
    dead = _COLLECTED.pop(run_id + "d", [])
    return (rows, dead, outcome_rows) if with_outcomes else (rows, dead)


def replay(events, spec=SPEC):
    """The same events through the pure computation with everything mature (what a replay emits)."""
    out = assemble_rewards(frames_from_events(events), spec, get_classifier(spec.classifier), None)
    return {r["request_id"]: r for r in out.rows.to_dicts()}


def test_out_of_order_events_give_the_same_rows_as_replay():
    events = [trajectory("r1", 0), applied("r1", 60, "abcd"), snapshot(600, "abc"), followup("r1", 30, "thanks"),
              trajectory("r2", 10, calls=("parse_error",), session_id="s2"), tool_result("r2", 20, "tool_error",
                                                                                        session_id="s2")]
    # arrive in reverse order, all before the watermark passes any maturity
    rows, dead = run_stream([("events", [(e, (e.event_time - T0).total_seconds()) for e in reversed(events)]),
                             ("watermark", DELAY + 100)])
    assert dead == []
    assert rows == replay(events)
    assert rows["r1"]["persistence"] == pytest.approx(0.75)
    assert rows["r2"]["broken_tool_calls"] == 2 and rows["r2"]["r_broken_tool"] == -1.0


def test_duplicates_are_dropped_and_each_request_is_emitted_once():
    t, a = trajectory("r1", 0), applied("r1", 60, "ab")
    rows, _ = run_stream([("events", [(t, 0), (a, 60), (t, 0), (a, 60)]),
                          ("events", [(snapshot(100, "ab"), 100), (a, 60)]),
                          ("watermark", DELAY + 1)])
    assert set(rows) == {"r1"} and rows["r1"]["persistence"] == 1.0


def test_snapshot_exactly_on_the_horizon_counts_and_no_snapshot_is_unknown():
    rows, _ = run_stream([("events", [(trajectory("r1", 0), 0), (applied("r1", 0, "ab"), 0),
                                      (snapshot(1800, "a"), 1800),
                                      (trajectory("r2", 0, session_id="s2"), 0), (applied("r2", 0, "ab", file="f9"), 0)]),
                          ("watermark", DELAY)])
    assert rows["r1"]["persistence"] == 0.5 and rows["r1"]["persistence_label"] == "known"
    assert rows["r2"]["persistence"] is None and rows["r2"]["persistence_label"] == "unknown"


def test_late_snapshot_within_allowed_lateness_counts_and_beyond_it_is_dropped_and_counted():
    # r1's horizon is at 1800 s; its row is mature at 600 + 1800 + 300 = 2700 s.
    inside = [("events", [(trajectory("r1", 0), 0), (applied("r1", 0, "ab"), 0)]),
              ("watermark", 2000),                                   # past the horizon, within lateness
              ("events", [(snapshot(1700, "ab"), 1700)]),            # late, but before maturity: counts
              ("watermark", DELAY + 10)]
    rows, _ = run_stream(inside)
    assert rows["r1"]["persistence"] == 1.0
    beyond = [("events", [(trajectory("r1", 0), 0), (applied("r1", 0, "ab"), 0)]),
              ("watermark", DELAY + 10),                             # r1 emitted: unknown
              ("events", [(snapshot(1700, "ab"), 1700), (trajectory("r0", -DELAY), -DELAY)])]
    rows, _ = run_stream(beyond)
    assert rows["r1"]["persistence_label"] == "unknown"
    assert "r0" not in rows                                          # a request that arrived after maturity


def test_rows_wait_for_maturity_and_privacy_mode_requests_never_produce_one():
    rows, _ = run_stream([("events", [(trajectory("r1", 0), 0), (trajectory("p", 0, privacy_mode=True), 0)]),
                          ("watermark", DELAY - 1)])
    assert set(rows) == {"r1"}  # emitted when the stream ends (watermark to infinity), never "p"


def test_clarification_deferral_in_a_stream():
    events = [trajectory("q", 0, kind="question"), followup("q", 20, "why are you asking? just do it"),
              trajectory("r2", 100), applied("r2", 110, "ab"), snapshot(500, "ab")]
    rows, _ = run_stream([("events", [(e, (e.event_time - T0).total_seconds()) for e in events]),
                          ("watermark", SPEC.maturity_delay_s(question=True) + 1)])
    assert rows["q"]["deferred_to_request_id"] == "r2"
    assert rows == replay(events)


def test_malformed_events_reach_the_dead_letter_output_with_a_reason():
    rows, dead = run_stream([("events", [(b"{not json", 0), ({"event_type": "trajectory"}, 0),
                                         (trajectory("r1", 0), 0)]),
                             ("watermark", DELAY)])
    assert set(rows) == {"r1"}
    assert sorted((d.reason, d.field) for d in dead) == [("invalid_field", "event_id"), ("invalid_json", "<event>")]
    assert all(d.detail and d.message.value for d in dead)
