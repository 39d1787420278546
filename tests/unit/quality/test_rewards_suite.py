"""The reward-table suite: valid rows pass; each broken rule fails the suite and is named."""

from __future__ import annotations

import math
from datetime import timedelta

import polars as pl
import pytest

from pipelines.quality import QualityConfig, check_rewards
from pipelines.quality.bench import synthetic_rewards
from pipelines.rewards.spec import RewardSpec, RewardWeights
from tests.unit.quality.helpers import (edit, events_frame, fixture_event, reward_frame, reward_row,
                                        valid_reward_rows)

SPEC = RewardSpec()


@pytest.fixture(scope="module")
def valid() -> pl.DataFrame:
    return reward_frame(valid_reward_rows(SPEC))


def test_valid_reward_rows_pass_every_rule(valid):
    result = check_rewards(valid, SPEC, privacy_request_ids=[])
    assert result.success, result.failed
    assert result.row_count == 5
    assert all(r.evaluated and r.success for r in result.results)
    assert "not_a_privacy_mode_request" in [r.rule for r in result.results]


def test_the_clipped_row_really_is_clipped(valid):
    row = valid.filter(pl.col("request_id") == "r-1").row(0, named=True)
    assert row["reward_unclipped"] < -SPEC.clip and row["reward"] == -SPEC.clip


def _with_row(valid: pl.DataFrame, i: int, **kw) -> pl.DataFrame:
    """The valid table with row r-i rebuilt by the spec-consistent helper (kw as reward_row takes them)."""
    others = valid.filter(pl.col("request_id") != f"r-{i}")
    return pl.concat([others, reward_frame([reward_row(i, SPEC, **kw)])])


def _mature_early(v):
    return edit(v, {"request_id": "r-0"}, mature_time=v.row(0, named=True)["request_time"] + timedelta(
        seconds=SPEC.maturity_delay_s() - 1))


BREAKS = {
    # rule(s) the mutation must fail (and nothing else): mutation of the valid table
    "request_id_not_null": (lambda v: edit(v, {"request_id": "r-2"}, request_id=None), set()),
    "request_id_unique": (lambda v: pl.concat([v, v.filter(pl.col("request_id") == "r-0")]), set()),
    "policy_version_not_null": (lambda v: edit(v, {"request_id": "r-0"}, policy_version=None), set()),
    "spec_version_not_null": (lambda v: edit(v, {"request_id": "r-0"}, spec_version=None), set()),
    "spec_version_is_checked_spec": (lambda v: edit(v, {"request_id": "r-0"}, spec_version="rs-other"), set()),
    "reward_and_components_finite": (lambda v: edit(v, {"request_id": "r-0"}, r_deferral=math.inf,
                                                    reward_unclipped=math.inf, reward=SPEC.clip),
                                     {"reward_unclipped_equals_sum_of_components"}),  # inf - inf is NaN
    "reward_within_clip": (lambda v: _with_row(v, 0, r_deferral=3.0, reward=3.0),
                           {"reward_equals_clipped_reward_unclipped"}),
    "reward_equals_clipped_reward_unclipped": (
        lambda v: edit(v, {"request_id": "r-2"}, reward=v.row(2, named=True)["reward"] + 0.01), set()),
    "reward_unclipped_equals_sum_of_components": (
        lambda v: edit(v, {"request_id": "r-3"}, r_deferral=0.0), set()),
    "persistence_within_0_1": (lambda v: _with_row(v, 0, p=1.5), set()),
    "persistence_null_exactly_when_label_not_known": (
        lambda v: edit(v, {"request_id": "r-2"}, persistence=0.5), set()),
    "r_persistence_matches_persistence": (lambda v: _with_row(v, 0, r_persistence=0.2), set()),
    "persistence_label_in_known_set": (lambda v: edit(v, {"request_id": "r-3"}, persistence_label="maybe"), set()),
    "edit_status_in_known_set": (lambda v: edit(v, {"request_id": "r-0"}, edit_status="half"), set()),
    "followup_status_in_known_set": (lambda v: edit(v, {"request_id": "r-0"}, followup_status="angry"), set()),
    "tool_calls_non_negative": (lambda v: _with_row(v, 2, tool_calls=-1), set()),
    "broken_tool_calls_non_negative": (lambda v: _with_row(v, 0, broken=-1), set()),
    "r_broken_tool_negative_exactly_when_broken_calls": (lambda v: _with_row(v, 0, broken=1, r_broken_tool=0.0),
                                                         set()),
    "r_followup_matches_followup_status": (lambda v: _with_row(v, 0, followup="dissatisfied", r_followup=0.0),
                                           set()),
    "r_length_matches_length_formula": (lambda v: _with_row(v, 0, r_length=0.0), set()),
    "mature_time_after_maturity_delay": (_mature_early, set()),
    "logprobs_match_completion_tokens": (lambda v: edit(v, {"request_id": "r-0"}, behaviour_logprobs=[-0.1]),
                                         set()),
    "completion_tokens_match_completion_token_ids": (lambda v: _with_row(v, 0, tokens=3, completion_tokens=4),
                                                     set()),
    "behaviour_logprobs_non_positive": (lambda v: edit(v, {"request_id": "r-0"},
                                                       behaviour_logprobs=[-0.1, 0.2, -0.3]), set()),
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_breaking_one_rule_fails_the_suite_on_that_rule(valid, rule):
    mutate, also = BREAKS[rule]
    result = check_rewards(mutate(valid), SPEC)
    assert not result.success
    assert set(result.failed_rules) == {rule} | also
    failed = result.rule(rule)
    assert failed.evaluated and failed.unexpected_count in (1, 2)  # 2: both copies of a duplicate
    assert failed.unexpected_examples and all("request_id" in e for e in failed.unexpected_examples)


def test_a_duplicate_request_id_names_the_id_in_the_examples(valid):
    result = check_rewards(pl.concat([valid, valid.filter(pl.col("request_id") == "r-3")]), SPEC)
    rule = result.rule("request_id_unique")
    assert not rule.success and rule.unexpected_count == 2
    assert {e["request_id"] for e in rule.unexpected_examples} == {"r-3"}


def test_a_privacy_mode_requests_row_fails_given_its_trajectory(valid):
    events = events_frame([fixture_event("trajectory", request_id="r-4").without_content(),
                           fixture_event("trajectory", request_id="r-0"),  # not privacy: fine
                           fixture_event("followup_message", privacy_mode=True, text="")])
    result = check_rewards(valid, SPEC, trajectories=events)
    assert result.failed_rules == ["not_a_privacy_mode_request"]
    assert [e["request_id"] for e in result.rule("not_a_privacy_mode_request").unexpected_examples] == ["r-4"]


def test_a_privacy_mode_requests_row_fails_given_its_request_id(valid):
    result = check_rewards(valid, SPEC, privacy_request_ids={"r-2", "r-99"})
    assert result.failed_rules == ["not_a_privacy_mode_request"]
    assert result.rule("not_a_privacy_mode_request").unexpected_count == 1


def test_without_privacy_information_the_privacy_rule_is_not_run(valid):
    assert "not_a_privacy_mode_request" not in [r.rule for r in check_rewards(valid, SPEC).results]


def test_a_missing_column_fails_the_schema_rule_and_the_rules_that_read_it(valid):
    result = check_rewards(valid.drop("mature_time"), SPEC)
    assert set(result.failed_rules) == {"matches_reward_row_schema", "mature_time_after_maturity_delay"}
    assert result.rule("matches_reward_row_schema").observed == "mature_time: missing"
    not_run = result.rule("mature_time_after_maturity_delay")
    assert not not_run.evaluated and not_run.status == "error" and "mature_time" in not_run.observed


def test_a_column_of_the_wrong_type_is_reported_not_crashed_on(valid):
    broken = valid.with_columns(pl.col("reward").cast(pl.String) + "x")
    result = check_rewards(broken, SPEC)
    assert "reward" in result.rule("matches_reward_row_schema").observed
    assert {"reward_within_clip", "reward_equals_clipped_reward_unclipped"} <= set(result.failed_rules)


def test_losslessly_castable_types_are_accepted(valid):
    narrowed = valid.with_columns(pl.col("tool_calls").cast(pl.Int32), pl.col("request_time").dt.cast_time_unit("ns"))
    assert check_rewards(narrowed, SPEC).success


def test_an_empty_table_fails_for_want_of_rows_unless_configured(valid):
    empty = valid.head(0)
    assert check_rewards(empty, SPEC).failed_rules == ["enough_reward_rows"]
    assert check_rewards(empty, SPEC, cfg=QualityConfig(rewards_min_rows=0)).success


def test_rows_are_checked_against_the_given_specs_clip_and_weights():
    spec = RewardSpec(clip=1.0, weights=RewardWeights(broken_tool=0.0, followup=2.0))
    rows = [reward_row(i, spec, followup="dissatisfied", broken=1, tool_calls=2) for i in range(3)]
    assert check_rewards(reward_frame(rows), spec).success
    # the same rows judged by the default spec: wrong version, clip, follow-up weight and broken-tool sign
    failed = set(check_rewards(reward_frame(rows), SPEC).failed_rules)
    assert {"spec_version_is_checked_spec", "r_followup_matches_followup_status",
            "r_broken_tool_negative_exactly_when_broken_calls"} <= failed


def test_a_zero_broken_tool_weight_expects_no_broken_tool_penalty():
    spec = RewardSpec(weights=RewardWeights(broken_tool=0.0))
    bad = reward_frame([reward_row(0, spec, broken=1, r_broken_tool=-0.5)])
    assert check_rewards(bad, spec).failed_rules == ["r_broken_tool_negative_exactly_when_broken_calls"]


def test_rewards_read_from_a_parquet_file_or_directory(tmp_path, valid):
    (tmp_path / "t").mkdir()
    valid.write_parquet(tmp_path / "t" / "part-0.parquet")
    assert check_rewards(tmp_path / "t" / "part-0.parquet", SPEC).success
    assert check_rewards(tmp_path / "t", SPEC).row_count == valid.height


def test_100k_valid_reward_rows_pass(capsys):
    frame = synthetic_rewards(100_000, SPEC)
    result = check_rewards(frame, SPEC, privacy_request_ids=[f"private-{i}" for i in range(1000)])
    assert result.success, result.failed
    assert result.row_count == 100_000
    with capsys.disabled():
        print(f"\nrewards suite: 100,000 rows, {len(result.results)} rules, {result.seconds:.3f} s")
