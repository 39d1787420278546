"""Two bounded runs chained by the carry, as consecutive cycles run them: a question still pending at the first
run's `as_of` finds, in the second, the next turn the first run already emitted."""

from __future__ import annotations

import uuid
from pathlib import Path

import apache_beam as beam
import pytest

from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.compute import ComputeRewards, run_and_count
from pipelines.rewards.cycle_job import ReadCarryFn
from pipelines.rewards.sink import write_carry as _write_carry
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.parse import DEAD_LETTER, ParseEventsFn
from pipelines.rewards.spec import RewardSpec
from schemas import to_wire
from tests.unit.rewards.builders import applied, at, followup, snapshot, trajectory

pytestmark = pytest.mark.slow
SPEC = RewardSpec()
DELAY, Q_DELAY = SPEC.maturity_delay_s(), SPEC.maturity_delay_s(question=True)
_OUT: dict[str, list] = {}


def _keep(key: str, item) -> None:
    _OUT.setdefault(key, []).append(item)


def run_bounded(events, carry_in: Path | None, carry_out: Path, after_s: float | None, as_of_s: float,
                outcomes: dict | None = None, spec: RewardSpec = SPEC):
    """One cycle's reward run: `events` plus the previous run's carry; returns (rows by request id, counters).
    `outcomes`: a dict to fill with the run's outcome rows by request id."""
    key = str(uuid.uuid4())
    p = beam.Pipeline()
    parsed = (p | "Events" >> beam.Create([to_wire(e) for e in events])
              | beam.ParDo(ParseEventsFn()).with_outputs(DEAD_LETTER, main="events"))
    files = sorted(str(f) for f in carry_in.glob("*.parquet")) if carry_in else []
    carried = p | "CarryFiles" >> beam.Create(files) | "ReadCarry" >> beam.ParDo(ReadCarryFn())
    rows, carry, outcome_rows = ((parsed.events, carried) | beam.Flatten()
                   | ComputeRewards(spec, 2, as_of=at(as_of_s), after=at(after_s) if after_s is not None else None))
    _ = rows | beam.FlatMap(lambda f: f.to_dicts()) | "KeepRows" >> beam.Map(lambda r: _keep(key, r))
    _ = carry | beam.combiners.ToList() | beam.Map(lambda bs: _write_carry(carry_out, bs))
    _ = (outcome_rows | "OutcomeDicts" >> beam.FlatMap(lambda f: f.to_dicts())
         | "KeepOutcomes" >> beam.Map(lambda r: _keep(key + "o", r)))
    counters = run_and_count(p)
    if outcomes is not None:
        outcomes.update({r["request_id"]: r for r in _OUT.get(key + "o", [])})
    _OUT.pop(key + "o", None)
    return {r["request_id"]: r for r in _OUT.pop(key, [])}, counters


def test_a_question_pending_across_cycles_inherits_the_next_turn_the_earlier_cycle_emitted(tmp_path):
    first = [trajectory("q", 0, kind="question"), followup("q", 20, "which file? src/app.py"),
             trajectory("next", 100), applied("next", 110, "ab"), snapshot(500, "ab")]
    # cycle 1 ends after the next turn matured and before the question did
    as_of_1 = 100 + DELAY + 100
    assert 100 + DELAY < as_of_1 < Q_DELAY
    # cycle 2 reads traffic after cycle 1's cut-off (anything older would be late)
    t3 = as_of_1 + 10
    later = [trajectory("r3", t3), applied("r3", t3 + 10, "cd", file="f2"), snapshot(t3 + 500, "cd", file="f2")]
    rows1, counters1 = run_bounded(first, None, tmp_path / "c1", None, as_of_1)
    assert set(rows1) == {"next"}
    rows2, counters2 = run_bounded(later, tmp_path / "c1", tmp_path / "c2", as_of_1, t3 + DELAY + 1)
    assert set(rows2) == {"q", "r3"}
    everything = assemble_rewards(frames_from_events(first + later), SPEC, get_classifier(SPEC.classifier), None)
    replayed = {r["request_id"]: r for r in everything.rows.to_dicts()}
    assert replayed["q"]["deferred_to_request_id"] == "next" and replayed["q"]["r_deferral"] > 0
    assert rows2["q"] == replayed["q"] and rows1["next"] == replayed["next"]
    # the carried, already emitted next turn is neither emitted again nor counted as a late request
    assert counters2.get("late_requests", 0) == 0 and counters1.get("late_requests", 0) == 0


def test_a_trajectory_that_arrives_after_its_maturity_was_fired_is_a_late_request(tmp_path):
    rows1, _ = run_bounded([trajectory("early", 0)], None, tmp_path / "c1", None, DELAY + 10)
    rows2, counters = run_bounded([trajectory("straggler", 5, workspace_id="ws9")], tmp_path / "c1",
                                  tmp_path / "c2", DELAY + 10, DELAY + 500)
    assert set(rows1) == {"early"} and rows2 == {}
    assert counters["late_requests"] == 1
