"""The reward formulas of pipelines/rewards/spec.py, checked against values derived by hand."""

import pytest

from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.spec import RewardSpec
from tests.unit.rewards.builders import (WordClassifier, applied, at, followup, rejected, shown, shown_lines,
                                         snapshot, tool_result, trajectory)

SPEC = RewardSpec()  # H=1800 s, apply window 600 s, W=600 s, lateness 300 s, default weights, clip 2
ALL = at(10**6)


def rows(*events, fire_at=ALL, fired_before=None, spec=SPEC):
    out = assemble_rewards(frames_from_events(events), spec, WordClassifier(), fire_at, fired_before)
    return {r["request_id"]: r for r in out.rows.to_dicts()}


def test_persistence_is_the_fraction_of_inserted_lines_in_the_latest_snapshot_at_the_horizon():
    r = rows(trajectory("r1"), applied("r1", 60, "abcd"),
             snapshot(30, "abcdefgh"),           # before the apply: not evidence
             snapshot(60 + 1000, "abx"),
             snapshot(60 + 1800, "abc"),         # exactly on the horizon: counts, and is the latest
             snapshot(60 + 1801, "abcd"))["r1"]  # past the horizon: ignored
    assert (r["edit_status"], r["persistence_label"], r["edit_lines"]) == ("applied", "known", 4)
    assert r["persistence"] == pytest.approx(0.75)
    assert r["r_persistence"] == pytest.approx(0.5)          # 1.0 * (2 * 0.75 - 1)
    assert r["reward"] == pytest.approx(0.5)


def test_snapshot_of_another_file_or_workspace_is_not_evidence_and_the_label_is_unknown():
    r = rows(trajectory("r1"), applied("r1", 60, "ab"), snapshot(100, "ab", file="f2"),
             snapshot(100, "ab", workspace_id="ws2"))["r1"]
    assert (r["persistence_label"], r["persistence"], r["r_persistence"]) == ("unknown", None, 0.0)


def test_persistence_over_two_edits_is_weighted_by_lines():
    r = rows(trajectory("r1"), applied("r1", 10, "ab", file="f1"), applied("r1", 20, "cdef", file="f2"),
             snapshot(100, "a", file="f1"), snapshot(100, "cdef", file="f2"))["r1"]
    assert r["persistence"] == pytest.approx(5 / 6) and r["edit_lines"] == 6


def test_edit_applied_after_the_apply_window_is_not_the_requests_outcome():
    r = rows(trajectory("r1"), applied("r1", 601, "ab"), snapshot(700, "ab"))["r1"]
    assert (r["edit_status"], r["persistence_label"]) == ("none", "not_applicable")


def test_rejected_or_shown_but_never_applied_edit_persists_zero():
    got = rows(trajectory("r1"), rejected("r1", 30), trajectory("r2", session_id="s2"), shown("r2", 5, session_id="s2"))
    for rid in ("r1", "r2"):
        assert (got[rid]["edit_status"], got[rid]["persistence"], got[rid]["r_persistence"]) == ("rejected", 0.0, -1.0)


def test_broken_tool_calls_count_parse_failures_and_model_caused_errors_only():
    r = rows(trajectory("r1", calls=("ok", "parse_error")),
             tool_result("r1", 5, "tool_error"), tool_result("r1", 6, "infrastructure"),
             tool_result("r1", 7, "none"), tool_result("r1", 900, "tool_error"))["r1"]  # last: outside W
    assert (r["tool_calls"], r["broken_tool_calls"], r["r_broken_tool"]) == (2, 2, -1.0)


def test_first_followup_within_the_window_is_classified():
    got = rows(trajectory("r1"), followup("r1", 100, "that is wrong"), followup("r1", 200, "thanks"),
               trajectory("r2", session_id="s2"), followup("r2", 601, "wrong!", session_id="s2"))
    assert (got["r1"]["followup_status"], got["r1"]["r_followup"]) == ("dissatisfied", -0.5)
    assert (got["r2"]["followup_status"], got["r2"]["r_followup"]) == ("none", 0.0)


def test_question_inherits_the_next_turns_edit_outcome_discounted_and_pays_for_needless_asking():
    got = rows(trajectory("q", 0, kind="question"), followup("q", 30, "you didn't need to ask, just do it"),
               trajectory("r2", 120), applied("r2", 150, "ab"), snapshot(400, "ab"))
    assert got["r2"]["r_persistence"] == pytest.approx(1.0)
    q = got["q"]
    assert q["deferred_to_request_id"] == "r2" and q["question_unnecessary"] is True
    assert SPEC.weights.unnecessary_question == 1.0
    assert q["r_deferral"] == pytest.approx(0.8 * 1.0 - 1.0)
    assert q["reward"] == pytest.approx(-0.2)                   # a needless question scores below zero even here


def test_a_question_whose_next_turn_is_private_inherits_nothing_and_never_the_turn_after():
    """Rules 2: the privacy-mode turn's outcome is unknown; the turn after it is not the question's next turn."""
    got = rows(trajectory("q", 0, kind="question"), trajectory("private", 60, privacy_mode=True),
               trajectory("r3", 120), applied("r3", 130, "ab"), snapshot(500, "ab"))
    q = got["q"]
    assert q["deferred_to_request_id"] is None and q["r_deferral"] == 0.0
    assert "private" not in got and got["r3"]["persistence"] == 1.0   # r3 itself is rewarded as usual


def test_a_rejected_edit_beside_an_applied_one_persists_zero_of_its_shown_lines():
    """Rules 2: every edit a request suggested counts; the rejected file's 2 shown lines persist 0."""
    r = rows(trajectory("r1"), shown("r1", 5, file="f1"), shown_lines("r1", 5, "xy", file="f2"),
             applied("r1", 10, "ab", file="f1"), rejected("r1", 12, file="f2"), snapshot(100, "ab", file="f1"))["r1"]
    assert (r["edit_status"], r["persistence_label"]) == ("applied", "known")
    assert r["persistence"] == pytest.approx(2 / 4)           # 2 present of 2 applied + 2 rejected lines
    unknown_size = rows(trajectory("r2"), applied("r2", 10, "ab", file="f1"), rejected("r2", 12, file="f2"),
                        snapshot(100, "ab", file="f1"))["r2"]
    assert unknown_size["persistence"] == pytest.approx(2 / 3)  # a rejection of unknown size counts one line
    alone = rows(trajectory("r3"), applied("r3", 10, "ab"), snapshot(100, "ab"))["r3"]
    assert alone["persistence"] == 1.0                          # a shown-then-applied file is not a rejection


def test_the_rules_version_is_part_of_the_spec_version():
    from pipelines.rewards import spec

    assert spec.RULES == 2 and SPEC.version() == RewardSpec().version()
    assert SPEC.version() != RewardSpec(deferral_discount=0.5).version()


def test_question_without_a_next_turn_inherits_nothing():
    q = rows(trajectory("q", 0, kind="question"), trajectory("other", 100, session_id="s2"))["q"]
    assert q["deferred_to_request_id"] is None and q["r_deferral"] == 0.0


def test_length_penalty_grows_fast_past_the_budget_and_the_sum_is_clipped():
    short = rows(trajectory("r1", tokens=96, calls=("ok",)))["r1"]
    assert short["r_length"] == pytest.approx(-0.2 * ((96 / 384) ** 3 + (1 / 8) ** 3) / 2)
    long = rows(trajectory("r2", tokens=768, calls=("ok",) * 16), followup("r2", 10, "wrong"),
                tool_result("r2", 5, "tool_error"))["r2"]
    assert long["r_length"] == pytest.approx(-0.2 * (8 + 8) / 2)            # x = y = 2 -> 2**3 each
    assert long["reward_unclipped"] == pytest.approx(-1.6 - 0.5 - 1.0)
    assert long["reward"] == -2.0


def test_rows_are_emitted_only_when_mature_and_only_once():
    events = (trajectory("r1", 0), trajectory("q", 0, kind="question", session_id="s2"))
    delay, q_delay = SPEC.maturity_delay_s(), SPEC.maturity_delay_s(question=True)
    assert delay == 600 + 1800 + 300 and q_delay == delay + 600
    assert rows(*events, fire_at=at(delay - 1)) == {}
    assert set(rows(*events, fire_at=at(delay))) == {"r1"}
    assert set(rows(*events, fire_at=at(q_delay), fired_before=at(delay))) == {"q"}


def test_privacy_mode_requests_produce_no_row():
    assert rows(trajectory("p", privacy_mode=True), applied("p", 10, "ab")) == {}


def test_every_row_carries_the_spec_version_and_the_trainer_fields():
    r = rows(trajectory("r1", tokens=3))["r1"]
    assert r["spec_version"] == SPEC.version() and r["spec_version"] != RewardSpec(clip=1.0).version()
    assert r["completion_token_ids"] == [3, 3, 3] and r["behaviour_logprobs"] == [-0.5] * 3
    assert (r["policy_version"], r["arm"], r["mature_time"]) == ("1", "treatment", at(SPEC.maturity_delay_s()))


def test_rows_carry_the_trajectorys_group_and_whether_it_was_cut_short():
    r = rows(trajectory("s0", tokens=2, group_id="req-1"), trajectory("s1", tokens=4, group_id="req-1", cut_short=True),
             trajectory("solo", tokens=1))
    assert [(r[k]["group_id"], r[k]["cut_short"]) for k in ("s0", "s1", "solo")] == [
        ("req-1", False), ("req-1", True), (None, False)]
    # a cut-short answer is rewarded like any other (its tokens are what the user saw); the trainer decides on it
    assert r["s1"]["completion_tokens"] == 4 and r["s1"]["reward"] == pytest.approx(r["s1"]["r_length"])
