"""The long-loop join (pipelines/rewards/outcomes.py) on hand-derived cases: an outcome within the long horizon
rewards the whole chain of its task, across sessions; one after it leaves the request unknown; duplicates are
decided by the first outcome; another org's outcome of the same task id decides nothing; rows come out only when
their outcome matures. Defaults: long horizon 8 h, outcome lateness 600 s, values merged 1, accepted 1,
reverted -1, abandoned -0.5, w.outcome 1, w.rating 0.25, clip 2."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.outcomes import assemble_outcomes
from pipelines.rewards.spec import RewardSpec
from tests.unit.rewards.builders import at, task_outcome, trajectory

SPEC = RewardSpec()
H = 8 * 3600
LATE = 600


def outcomes(events, fire_at=None, fired_before=None, spec=SPEC) -> dict[str, dict]:
    rows, _ = assemble_outcomes(frames_from_events(events), spec, fire_at, fired_before)
    return {r["request_id"]: r for r in rows.to_dicts()}


def test_an_outcome_within_the_horizon_rewards_every_request_of_the_chain_across_sessions():
    chain = [trajectory("r1", 0, task_id="t1", session_id="s1"), trajectory("r2", 600, task_id="t1", session_id="s1"),
             trajectory("r3", 3600, task_id="t1", session_id="s2")]     # the user came back in another session
    rows = outcomes(chain + [trajectory("other", 100), task_outcome("t1", 4 * 3600, "merged", rating=5)])
    assert set(rows) == {"r1", "r2", "r3"}                               # an interactive request has no outcome row
    for rid in ("r1", "r2", "r3"):
        r = rows[rid]
        assert (r["outcome_label"], r["outcome"], r["rating"], r["chain_requests"]) == ("known", "merged", 5, 3)
        assert r["r_outcome"] == pytest.approx(1.0 + 0.25 * (5 - 3) / 2)     # 1.25
        assert r["outcome_time"] == at(4 * 3600) and r["mature_time"] == at(4 * 3600 + LATE)
    assert rows["r3"]["session_id"] == "s2" and rows["r1"]["request_time"] == at(0)


@pytest.mark.parametrize("outcome,rating,expected", [("accepted", None, 1.0), ("reverted", None, -1.0),
                                                      ("abandoned", None, -0.5), ("reverted", 1, -1.25),
                                                      ("abandoned", 4, -0.375), ("merged", 3, 1.0)])
def test_the_outcome_reward_is_the_weighted_value_plus_the_rating_term(outcome, rating, expected):
    rows = outcomes([trajectory("r1", 0, task_id="t"), task_outcome("t", 60, outcome, rating=rating)])
    assert rows["r1"]["r_outcome"] == pytest.approx(expected)


def test_the_outcome_reward_is_clipped():
    spec = RewardSpec(weights={"outcome": 3.0})
    rows = outcomes([trajectory("r1", 0, task_id="t"), task_outcome("t", 60, "merged", rating=5)], spec=spec)
    assert rows["r1"]["r_outcome"] == 2.0                                  # 3 + 0.25, clipped to 2


def test_an_outcome_after_the_long_horizon_leaves_the_request_unknown_and_rewards_only_later_ones():
    events = [trajectory("early", 0, task_id="t"), trajectory("late", 2 * 3600, task_id="t"),
              task_outcome("t", H + 100, "accepted")]
    rows = outcomes(events)
    early, late = rows["early"], rows["late"]
    assert (early["outcome_label"], early["outcome"], early["r_outcome"]) == ("unknown", "", 0.0)
    assert early["rating"] is None and early["outcome_time"] is None and early["outcome_event_id"] is None
    assert early["mature_time"] == at(H + LATE)                              # request + horizon + lateness
    assert (late["outcome_label"], late["r_outcome"], late["chain_requests"]) == ("known", 1.0, 1)
    assert late["mature_time"] == at(H + 100 + LATE)


def test_an_outcome_at_exactly_the_horizon_counts_and_a_request_after_the_outcome_is_not_its_chain():
    events = [trajectory("r1", 0, task_id="t"), task_outcome("t", H, "merged"),
              trajectory("after", H + 60, task_id="t")]
    rows = outcomes(events)
    assert rows["r1"]["outcome_label"] == "known"
    assert rows["after"]["outcome_label"] == "unknown"


def test_duplicates_one_copy_of_an_event_and_the_first_of_several_outcomes_decides():
    first = task_outcome("t", 3600, "accepted", rating=4)
    events = [trajectory("r1", 0, task_id="t"), first, first.model_copy(),   # a resent copy: same event id
              task_outcome("t", 7200, "reverted")]                           # a second outcome, later
    rows = outcomes(events)
    r = rows["r1"]
    assert (r["outcome"], r["outcome_event_id"], r["chain_requests"]) == ("accepted", first.event_id, 1)
    assert r["r_outcome"] == pytest.approx(1.0 + 0.25 * 0.5)
    # two outcomes at the same instant: the smaller event id decides, whatever the arrival order
    a = task_outcome("t", 3600, "merged", event_id="00000000-0000-4000-8000-00000000000a")
    b = task_outcome("t", 3600, "abandoned", event_id="00000000-0000-4000-8000-00000000000b")
    for order in ([a, b], [b, a]):
        assert outcomes([trajectory("r1", 0, task_id="t"), *order])["r1"]["outcome"] == "merged"


def test_another_orgs_outcome_of_the_same_task_id_decides_nothing():
    events = [trajectory("r1", 0, task_id="t", org_id="acme"),
              task_outcome("t", 60, "reverted", org_id="globex")]
    assert outcomes(events)["r1"]["outcome_label"] == "unknown"
    events.append(task_outcome("t", 120, "merged", org_id="acme", workspace_id="elsewhere"))
    assert outcomes(events)["r1"]["outcome_label"] == "unknown"             # another workspace: another task


def test_privacy_mode_requests_get_no_outcome_row():
    events = [trajectory("p", 0, task_id="t", privacy_mode=True), trajectory("r", 10, task_id="t"),
              task_outcome("t", 60, "merged")]
    rows = outcomes(events)
    assert set(rows) == {"r"} and rows["r"]["chain_requests"] == 1


def test_a_privacy_mode_outcome_decides_the_tasks_requests_like_any_other():
    """A task_outcome carries no content: privacy is decided by each request's own trajectory (docs/rewards.md)."""
    events = [trajectory("r", 0, task_id="t"), task_outcome("t", 60, "merged", privacy_mode=True)]
    assert outcomes(events)["r"]["outcome"] == "merged"


def test_rows_come_out_once_their_outcome_has_matured():
    events = [trajectory("known", 0, task_id="a"), task_outcome("a", 3600, "merged"),
              trajectory("unknown", 0, task_id="b")]
    assert outcomes(events, fire_at=at(3600 + LATE - 1)) == {}
    assert set(outcomes(events, fire_at=at(3600 + LATE))) == {"known"}
    assert set(outcomes(events, fire_at=at(H + LATE), fired_before=at(3600 + LATE))) == {"unknown"}
    rows, counts = assemble_outcomes(frames_from_events(events), SPEC, at(H + LATE))
    assert counts == {"outcome_rows": 2, "outcome_unknown": 1}


def test_the_long_horizon_and_lateness_are_configuration():
    spec = RewardSpec(long_horizon_s=3600, outcome_lateness_s=60)
    events = [trajectory("r1", 0, task_id="t"), task_outcome("t", 3601, "merged")]
    r = outcomes(events, spec=spec)["r1"]
    assert r["outcome_label"] == "unknown" and r["mature_time"] == at(3600 + 60)
    assert spec.version() != SPEC.version()
    # a task's events are kept past the long horizon until no row of its chain can be pending: the outcome
    # lateness, or a question's reward-row maturity (1800 + 600 + 600 + 300 s) when that is longer
    assert spec.outcome_keep_s() == 3600 + 3300
    assert SPEC.outcome_keep_s() == timedelta(hours=8, minutes=55).total_seconds()
    assert RewardSpec(outcome_lateness_s=7200).outcome_keep_s() == 8 * 3600 + 7200
