"""The reward-table suite: may the trainer learn from these rows? (docs/rewards.md, `schemas.rewards.RewardRow`)

Checked against the `RewardSpec` the rows claim to come from: the clip, the sum of the components, the maturity
delay, the weights' signs. A failure blocks the cycle's training. Privacy-mode requests must never have a row:
pass the trajectory events of the window (or the privacy-mode request ids) to check that too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import polars as pl
import pyarrow as pa

from pipelines.quality.config import QualityConfig
from pipelines.quality.expectations import (Expectation, between, conform, holds, in_set, not_null,
                                            row_count_between, schema, unique)
from pipelines.quality.result import SuiteResult
from pipelines.quality.runner import run_suite
from schemas.reward_table import read_reward_table
from pipelines.rewards.spec import RewardSpec
from schemas.arrow import model_arrow_schema
from schemas.rewards import EditStatus, FollowupStatus, PersistenceLabel, RewardRow

COMPONENTS = ("r_persistence", "r_followup", "r_broken_tool", "r_deferral", "r_length")


def reward_schema() -> pa.Schema:
    return model_arrow_schema(RewardRow)


def privacy_mode_request_ids(events: pl.DataFrame) -> set[str]:
    """The request_ids of privacy-mode trajectories in a frame of events (trajectory-only or all types)."""
    if events.is_empty() or "request_id" not in events.columns or "privacy_mode" not in events.columns:
        return set()
    rows = events.filter(pl.col("privacy_mode").fill_null(False))
    if "event_type" in rows.columns:
        rows = rows.filter(pl.col("event_type") == "trajectory")
    return set(rows.get_column("request_id").drop_nulls().to_list())


def _close(a: pl.Expr, b: pl.Expr, tol: float) -> pl.Expr:
    """|a - b| <= tol, relative once |b| > 1. A NaN or null on either side is not close."""
    return (a - b).abs() <= tol * pl.max_horizontal(pl.lit(1.0), b.abs())


def rewards_expectations(spec: RewardSpec, problems: dict[str, str], cfg: QualityConfig,
                         privacy_ids: set[str] | None = None) -> list[Expectation]:
    w, tol, clip = spec.weights, cfg.tolerance, spec.clip
    col = pl.col
    exps = [schema(problems, rule="matches_reward_row_schema",
                   description="every RewardRow column is present with its Arrow type")]
    if cfg.rewards_min_rows:
        exps.append(row_count_between(cfg.rewards_min_rows, rule="enough_reward_rows",
                                      description=f"at least {cfg.rewards_min_rows} reward rows"))
    exps += [
        not_null("request_id"),
        unique("request_id", description="one row per served request (the table is keyed by request_id)"),
        not_null("policy_version"),
        not_null("spec_version"),
    ]
    if cfg.require_spec_version:
        exps.append(in_set("spec_version", [spec.version()], rule="spec_version_is_checked_spec",
                           description=f"rows were computed by the spec checked here ({spec.version()})"))
    exps += [
        holds("reward_and_components_finite",
              pl.all_horizontal([col(c).is_finite() for c in ("reward", "reward_unclipped", *COMPONENTS)]),
              ("request_id", "reward", "reward_unclipped", *COMPONENTS),
              "reward, reward_unclipped and every r_* component are finite numbers (not null, NaN or inf)"),
        between("reward", -clip, clip, rule="reward_within_clip", description=f"-{clip:g} <= reward <= {clip:g}"),
        holds("reward_equals_clipped_reward_unclipped",
              _close(col("reward"), col("reward_unclipped").clip(-clip, clip), tol),
              ("request_id", "reward", "reward_unclipped"),
              f"reward == clip(reward_unclipped, -{clip:g}, {clip:g}) (tolerance {tol:g})"),
        holds("reward_unclipped_equals_sum_of_components",
              _close(col("reward_unclipped"), pl.sum_horizontal([col(c) for c in COMPONENTS]), tol),
              ("request_id", "reward_unclipped", *COMPONENTS),
              f"reward_unclipped == {' + '.join(COMPONENTS)} (tolerance {tol:g})"),
        in_set("persistence_label", [v.value for v in PersistenceLabel]),
        in_set("edit_status", [v.value for v in EditStatus]),
        in_set("followup_status", [v.value for v in FollowupStatus]),
        between("persistence", 0, 1, rule="persistence_within_0_1"),
        holds("persistence_null_exactly_when_label_not_known",
              pl.when(col("persistence_label") == "known").then(col("persistence").is_finite())
              .otherwise(col("persistence").is_null()),
              ("request_id", "persistence", "persistence_label"),
              "persistence is a number when persistence_label is 'known', and null otherwise"),
        holds("r_persistence_matches_persistence",
              pl.when(col("persistence_label") == "known")
              .then(_close(col("r_persistence"), w.persistence * (2 * col("persistence") - 1), tol))
              .when(col("persistence_label") == "unknown").then(_close(col("r_persistence"), pl.lit(0.0), tol))
              .otherwise(True),
              ("request_id", "persistence_label", "persistence", "r_persistence"),
              f"known: r_persistence == {w.persistence:g} * (2p - 1); unknown: r_persistence == 0 (excluded)"),
        between("tool_calls", 0, None, rule="tool_calls_non_negative"),
        between("broken_tool_calls", 0, None, rule="broken_tool_calls_non_negative",
                description="broken_tool_calls >= 0 (not bounded by tool_calls: tool results add to it)"),
        _broken_tool_rule(w.broken_tool),
        holds("r_followup_matches_followup_status",
              _close(col("r_followup"), pl.when(col("followup_status") == "dissatisfied")
                     .then(pl.lit(-w.followup)).otherwise(pl.lit(0.0)), tol),
              ("request_id", "followup_status", "r_followup"),
              f"r_followup == -{w.followup:g} for a dissatisfied follow-up, else 0"),
        holds("r_length_matches_length_formula",
              _close(col("r_length"), -w.length * (
                  (col("completion_tokens") / spec.length_token_budget) ** spec.length_exponent
                  + (col("tool_calls") / spec.length_tool_budget) ** spec.length_exponent) / 2, tol),
              ("request_id", "completion_tokens", "tool_calls", "r_length"),
              f"r_length == -{w.length:g} * ((completion_tokens/{spec.length_token_budget})^{spec.length_exponent:g}"
              f" + (tool_calls/{spec.length_tool_budget})^{spec.length_exponent:g}) / 2"),
        holds("mature_time_after_maturity_delay",
              col("mature_time") >= col("request_time") + pl.duration(
                  microseconds=int(round(spec.maturity_delay_s(question=False) * 1e6))),
              ("request_id", "request_time", "mature_time"),
              f"mature_time >= request_time + {spec.maturity_delay_s(question=False):g} s (maturity delay)"),
        holds("logprobs_match_completion_tokens",
              col("behaviour_logprobs").list.len() == col("completion_token_ids").list.len(),
              ("request_id", "completion_token_ids", "behaviour_logprobs"),
              "one behaviour log-prob per completion token"),
        holds("completion_tokens_match_completion_token_ids",
              col("completion_tokens") == col("completion_token_ids").list.len(),
              ("request_id", "completion_tokens", "completion_token_ids"),
              "completion_tokens == len(completion_token_ids)"),
        holds("behaviour_logprobs_non_positive",
              col("behaviour_logprobs").list.eval(pl.element() <= 0).list.all(),
              ("request_id", "behaviour_logprobs"),
              "every behaviour log-prob is <= 0 (a NaN fails)"),
    ]
    if privacy_ids is not None:
        exps.append(holds("not_a_privacy_mode_request",
                          ~col("request_id").is_in(pl.Series(sorted(privacy_ids), dtype=pl.String).implode()),
                          ("request_id",),
                          f"no row belongs to a privacy-mode trajectory ({len(privacy_ids)} such requests given)"))
    return exps


def _broken_tool_rule(weight: float) -> Expectation:
    inputs = ("request_id", "broken_tool_calls", "r_broken_tool")
    if weight > 0:
        return holds("r_broken_tool_negative_exactly_when_broken_calls",
                     (pl.col("r_broken_tool") < 0) == (pl.col("broken_tool_calls") > 0), inputs,
                     "r_broken_tool < 0 exactly when broken_tool_calls > 0 (broken samples are kept, penalised)")
    return holds("r_broken_tool_negative_exactly_when_broken_calls", pl.col("r_broken_tool") == 0, inputs,
                 "weights.broken_tool is 0: r_broken_tool == 0")


def check_rewards(rewards: pl.DataFrame | pa.Table | str | Path, spec: RewardSpec | None = None, *,
                  trajectories: pl.DataFrame | None = None, privacy_request_ids: Iterable[str] | None = None,
                  cfg: QualityConfig | None = None, name: str = "rewards") -> SuiteResult:
    """Run the reward-table suite.

    `rewards`: a frame or Arrow table with the RewardRow schema, or a Parquet file/directory. `spec`: the reward
    spec the rows must satisfy (default `RewardSpec()`). Privacy: `trajectories` (trajectory events or the
    all-types event frame of the window) and/or `privacy_request_ids`; with neither, that rule is not run.
    """
    spec = spec or RewardSpec()
    cfg = cfg or QualityConfig()
    if isinstance(rewards, (str, Path)):
        rewards = read_reward_table(rewards)
    elif isinstance(rewards, pa.Table):
        rewards = pl.from_arrow(rewards)
    privacy_ids: set[str] | None = None
    if trajectories is not None or privacy_request_ids is not None:
        privacy_ids = set(privacy_request_ids or ())
        if trajectories is not None:
            privacy_ids |= privacy_mode_request_ids(trajectories)
    frame, problems = conform(rewards, reward_schema())
    return run_suite(name, frame, rewards_expectations(spec, problems, cfg, privacy_ids), key="request_id",
                     examples=cfg.examples)
