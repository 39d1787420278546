"""The events suite: fixture events pass; each broken rule fails the suite and is named."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

from pipelines.quality import QualityConfig, check_archive, check_events, check_rewards
from pipelines.rewards.spec import RewardSpec
from schemas import EVENT_TYPES
from schemas.events import Trajectory
from tests.unit.quality.helpers import (T0, edit, events_frame, fixture_event, reward_frame, reward_row,
                                        valid_events)


@pytest.fixture(scope="module")
def valid() -> pl.DataFrame:
    return events_frame(valid_events())


def _first(frame: pl.DataFrame, event_type: str, privacy: bool = False) -> dict:
    return {"event_id": frame.filter((pl.col("event_type") == event_type)
                                     & (pl.col("privacy_mode") == privacy))["event_id"][0]}


def test_fixture_events_of_every_type_pass(valid):
    assert set(valid["event_type"]) == set(EVENT_TYPES)
    assert valid["privacy_mode"].sum() == 3
    result = check_events(valid)
    assert result.success, result.failed
    rules = {r.rule for r in result.results}
    assert {"logprobs_match_completion_tokens", "privacy_rows_have_no_text",
            "privacy_rows_have_no_error_message", "event_time_not_after_received_time_plus_skew"} <= rules


def _late(v):
    return edit(v, _first(v, "codebase_snapshot"), event_time=T0 - timedelta(days=8))


BREAKS = {
    "event_id_not_null": lambda v: edit(v, _first(v, "edit_applied"), event_id=None),
    "event_id_unique": lambda v: pl.concat([v, v.filter(pl.col("event_type") == "edit_rejected")]),
    "event_type_not_null": lambda v: edit(v, _first(v, "edit_rejected"), event_type=None),
    "event_type_known": lambda v: edit(v, _first(v, "edit_rejected"), event_type="edit_regretted"),
    "schema_version_not_null": lambda v: edit(v, _first(v, "edit_rejected"), schema_version=None),
    "schema_version_at_least_1": lambda v: edit(v, _first(v, "edit_rejected"), schema_version=0),
    "schema_version_not_newer_than_known": lambda v: edit(v, _first(v, "trajectory"), schema_version=Trajectory.SCHEMA_VERSION + 1),
    "user_id_not_null": lambda v: edit(v, _first(v, "suggestion_shown"), user_id=None),
    "org_id_not_null": lambda v: edit(v, _first(v, "suggestion_shown"), org_id=None),
    "workspace_id_not_null": lambda v: edit(v, _first(v, "suggestion_shown"), workspace_id=None),
    "session_id_not_null": lambda v: edit(v, _first(v, "suggestion_shown"), session_id=None),
    "event_time_not_null": lambda v: edit(v, _first(v, "suggestion_shown"), event_time=None),
    "event_time_not_before_min_event_time": lambda v: edit(
        v, _first(v, "codebase_snapshot"), event_time=datetime(1970, 1, 1, tzinfo=timezone.utc),
        received_time=datetime(1970, 1, 1, 0, 0, 1, tzinfo=timezone.utc)),
    "event_time_not_too_long_before_received_time": _late,
    "event_time_not_after_received_time_plus_skew": lambda v: edit(
        v, _first(v, "followup_message"), event_time=T0 + timedelta(hours=1)),
    "privacy_rows_have_no_prompt_token_ids": lambda v: edit(v, _first(v, "trajectory", True),
                                                            prompt_token_ids=[5, 6]),
    "privacy_rows_have_no_completion_token_ids": lambda v: edit(v, _first(v, "trajectory", True),
                                                                completion_token_ids=[7]),
    "privacy_rows_have_no_behaviour_logprobs": lambda v: edit(v, _first(v, "trajectory", True),
                                                              behaviour_logprobs=[-0.1]),
    "privacy_rows_have_no_text": lambda v: edit(v, _first(v, "followup_message", True), text="undo that"),
    "privacy_rows_have_no_error_message": lambda v: edit(v, _first(v, "tool_call_result", True),
                                                         error_message="exit status 1"),
    "logprobs_match_completion_tokens": lambda v: edit(v, _first(v, "trajectory"), behaviour_logprobs=[-0.1]),
    "behaviour_logprobs_non_positive": lambda v: edit(v, _first(v, "trajectory"), behaviour_logprobs=[-0.1, 0.5]),
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_breaking_one_rule_fails_the_suite_on_that_rule(valid, rule):
    result = check_events(BREAKS[rule](valid))
    assert not result.success
    assert result.failed_rules == [rule]
    failed = result.rule(rule)
    assert failed.evaluated and failed.unexpected_count in (1, 2)  # 2: both copies of a duplicate
    assert failed.unexpected_examples


def test_time_limits_are_configuration(valid):
    late = _late(valid)
    assert check_events(late, QualityConfig(max_event_age_s=9 * 86400)).success
    ahead = BREAKS["event_time_not_after_received_time_plus_skew"](valid)
    assert check_events(ahead, QualityConfig(max_clock_skew_s=7200)).success


def test_rows_without_received_time_are_judged_against_the_batch(valid):
    no_receipt = edit(valid, _first(valid, "codebase_snapshot"), received_time=None,
                      event_time=T0 + timedelta(hours=2))  # after every other row's receipt + skew
    assert check_events(no_receipt).failed_rules == ["event_time_not_after_received_time_plus_skew"]


def test_a_frame_without_received_time_checks_only_the_time_floor(valid):
    result = check_events(valid.drop("received_time"))
    assert result.success
    assert [r.rule for r in result.results if r.rule.startswith("event_time_not")] == [
        "event_time_not_null", "event_time_not_before_min_event_time"]


def test_a_single_type_frame_runs_only_the_rules_its_columns_allow(valid):
    snapshots = valid.filter(pl.col("event_type") == "codebase_snapshot").select(
        [c for c in valid.columns if c not in ("text", "error_message", "prompt_token_ids", "completion_token_ids",
                                               "behaviour_logprobs", "tool_calls", "request_id")])
    result = check_events(snapshots)
    assert result.success
    assert not any(r.rule.startswith("privacy_rows") or "logprobs" in r.rule for r in result.results)


def test_a_missing_envelope_column_fails_the_schema_rule(valid):
    result = check_events(valid.drop("session_id"))
    assert set(result.failed_rules) == {"envelope_matches_schema", "session_id_not_null"}
    assert result.rule("envelope_matches_schema").observed == "session_id: missing"


def test_events_read_back_from_the_archive_pass_and_feed_the_privacy_rule(tmp_path):
    from tests.unit.archive.helpers import FakeLog, archive_all

    log = FakeLog(partitions=1)
    log.produce(valid_events() + [fixture_event("trajectory", request_id="r-1")])
    archive_all(tmp_path, log)
    result, events = check_archive(tmp_path)
    assert result.success, result.failed
    assert result.row_count == len(valid_events()) + 1
    spec = RewardSpec()
    rows = reward_frame([reward_row(0, spec, request_id="r-private"), reward_row(1, spec)])
    rewards = check_rewards(rows, spec, trajectories=events)
    assert rewards.failed_rules == ["not_a_privacy_mode_request"]
    assert [e["request_id"] for e in rewards.rule("not_a_privacy_mode_request").unexpected_examples] == [
        "r-private"]
