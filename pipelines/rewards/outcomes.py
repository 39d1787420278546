"""The long-loop join: background tasks' outcomes -> one outcome row per request of the task (docs/rewards.md,
"Long loops"; the formulas are in spec.py).

Pure and deterministic like `assemble_rewards`: buffered frames in, the outcome rows maturing in
(fired_before, fire_at] out. A request of a background task (a trajectory with a `task_id`) takes the first
`task_outcome` of its task -- same org, same workspace, same task id; first by event time, then event id --
whose time lies in [request time, request time + long horizon]. Every request of the task before that outcome
takes the same outcome: the chain, however many sessions and turns it spans. The row matures `outcome_lateness_s`
after the outcome, or after the long horizon when none came (outcome unknown), and never before the request's own
reward row (so a cycle that emits an outcome row has emitted, then or before, the reward row it weights). Which rows are emitted depends only
on event times and the firing watermark, so streaming, cycle and replay runs emit the same rows.

The org is part of the key: the collector sets each event's org from the client's key, so one org's
task_outcome can never decide another org's requests, whatever task id it names.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from pipelines.rewards.assemble import reward_maturity
from pipelines.rewards.spec import RewardSpec
from schemas.reward_table import OUTCOME_SCHEMA

KEY = ("org_id", "workspace_id", "task_id")
EMPTY_OUTCOMES = pl.from_arrow(OUTCOME_SCHEMA.empty_table())


def task_requests(traj: pl.DataFrame) -> pl.DataFrame:
    """The non-privacy trajectories of background tasks (privacy-mode requests have no trainable content)."""
    if "task_id" not in traj.columns:
        return traj.clear().with_columns(task_id=pl.lit(None, dtype=pl.String))
    return traj.filter(pl.col("task_id").is_not_null() & ~pl.col("privacy_mode"))


def _decided(reqs: pl.DataFrame, outcomes: pl.DataFrame, spec: RewardSpec) -> pl.DataFrame:
    """request_id -> the first outcome of its task within [request time, + long horizon]."""
    horizon = timedelta(seconds=spec.long_horizon_s)
    cols = outcomes.select(*KEY, outcome_event_id="event_id", outcome_time="event_time",
                           outcome=pl.col("outcome"), rating=pl.col("rating"))
    return (reqs.select("request_id", *KEY, "event_time").join(cols, on=list(KEY))
            .filter((pl.col("outcome_time") >= pl.col("event_time"))
                    & (pl.col("outcome_time") <= pl.col("event_time") + horizon))
            .sort("outcome_time", "outcome_event_id")
            .group_by("request_id", maintain_order=True).first()
            .select("request_id", "outcome_event_id", "outcome_time", "outcome", "rating"))


def _reward(spec: RewardSpec) -> pl.Expr:
    values = spec.outcome_values.model_dump()
    w = spec.weights
    value = pl.col("outcome").replace_strict(values, default=0.0, return_dtype=pl.Float64)
    rating = pl.when(pl.col("rating").is_not_null()).then(w.rating * (pl.col("rating") - 3) / 2).otherwise(0.0)
    return (pl.when(pl.col("outcome_event_id").is_null()).then(0.0)
            .otherwise((w.outcome * value + rating).clip(-spec.clip, spec.clip)).round(12))


def outcome_maturities(traj: pl.DataFrame, outcomes: pl.DataFrame, spec: RewardSpec) -> pl.Series:
    """Times at which an outcome row of these events can mature (for the streaming join's timer): each task
    request's long-horizon end and each outcome's lateness end, both + outcome_lateness_s. A superset of the
    rows' maturities: a firing at one of them that emits nothing is harmless."""
    late = timedelta(seconds=spec.outcome_lateness_s)
    ends = [task_requests(traj).select(t=pl.col("event_time") + timedelta(seconds=spec.long_horizon_s) + late),
            outcomes.select(t=pl.col("event_time") + late)]
    return pl.concat(ends)["t"]


def assemble_outcomes(frames: dict[str, pl.DataFrame], spec: RewardSpec, fire_at: datetime | None,
                      fired_before: datetime | None = None) -> tuple[pl.DataFrame, dict[str, int]]:
    """(outcome rows, counts) of every buffered task request whose outcome row matures in
    (fired_before, fire_at]; `fire_at=None`: every one (tests of the formulas)."""
    reqs = task_requests(frames["trajectory"])
    if reqs.is_empty():
        return EMPTY_OUTCOMES, {"outcome_rows": 0, "outcome_unknown": 0}
    outcomes = frames["task_outcome"]
    decided = _decided(reqs, outcomes, spec)
    late = timedelta(seconds=spec.outcome_lateness_s)
    horizon = timedelta(seconds=spec.long_horizon_s)
    rows = (reqs.join(decided, on="request_id", how="left")
            .with_columns(mature_time=pl.max_horizontal(
                pl.when(pl.col("outcome_event_id").is_not_null()).then(pl.col("outcome_time") + late)
                .otherwise(pl.col("event_time") + horizon + late),
                reward_maturity(spec))))      # never before the request's reward row: the trainer finds it then
    if fire_at is not None:
        rows = rows.filter(pl.col("mature_time") <= fire_at)
    if fired_before is not None:
        rows = rows.filter(pl.col("mature_time") > fired_before)
    if rows.is_empty():
        return EMPTY_OUTCOMES, {"outcome_rows": 0, "outcome_unknown": 0}
    # the chain: every buffered request of the task that this outcome decided (the buffer keeps a task's
    # requests for the long horizon, so the count is the whole chain's)
    chain = decided.group_by("outcome_event_id").agg(chain_requests=pl.len())
    rows = (rows.join(chain, on="outcome_event_id", how="left")
            .with_columns(chain_requests=pl.col("chain_requests").fill_null(1),
                          outcome_label=pl.when(pl.col("outcome_event_id").is_null()).then(pl.lit("unknown"))
                          .otherwise(pl.lit("known")),
                          outcome=pl.col("outcome").fill_null(""),
                          request_time=pl.col("event_time"),
                          r_outcome=_reward(spec),
                          spec_version=pl.lit(spec.version())))
    rows = rows.select([pl.col(n).cast(EMPTY_OUTCOMES.schema[n]) for n in EMPTY_OUTCOMES.columns]).sort("request_id")
    unknown = int((rows["outcome_label"] == "unknown").sum())
    return rows, {"outcome_rows": rows.height, "outcome_unknown": unknown}


def keep_mask(frame: pl.DataFrame, event_type: str, fire_at: datetime, spec: RewardSpec) -> pl.Series | None:
    """Which buffered events the long-loop join still needs after a firing at `fire_at` (None: none of this
    type): background tasks' trajectories and their outcomes, for `spec.outcome_keep_s()` -- until no row whose
    outcome or chain they decide can still be pending."""
    if event_type not in ("trajectory", "task_outcome") or frame.is_empty():
        return None
    cut = fire_at - timedelta(seconds=spec.outcome_keep_s())
    recent = frame["event_time"] >= cut
    if event_type == "task_outcome":
        return recent
    if "task_id" not in frame.columns:
        return None
    return recent & frame["task_id"].is_not_null()
