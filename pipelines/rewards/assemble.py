"""The reward computation itself, vectorized with polars: buffered events in, reward rows out.

Pure and deterministic: no clock, no I/O. The Beam transform (`AssembleRewardsFn`) calls it per shard when an
event-time timer fires; the benchmark's single-process reference calls it once over all events. Which requests
are emitted is decided only by their maturity time versus the firing watermark, so streaming, offset-range and
replay runs emit identical rows (see `spec.py` for the formulas).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import polars as pl

from pipelines.rewards.spec import RewardSpec
from schemas.reward_table import ROW_SCHEMA

FRAME_TYPES = ("trajectory", "suggestion_shown", "edit_applied", "edit_rejected", "codebase_snapshot",
               "followup_message", "tool_call_result")
_EMPTY_ROWS = pl.from_arrow(ROW_SCHEMA.empty_table())
# Per-token payload the trainer needs but no join looks at: carried aside and attached once to the emitted rows
# (gathering these lists through every join costs more than the whole join logic).
PAYLOAD = ("prompt_token_ids", "completion_token_ids", "behaviour_logprobs")
ROUNDED = ("persistence", "r_persistence", "r_followup", "r_broken_tool", "r_deferral", "r_length",
           "reward_unclipped", "reward")

if TYPE_CHECKING:
    from pipelines.rewards.classifiers import FollowupClassifier


@dataclass
class Assembled:
    rows: pl.DataFrame                     # RewardRow columns, sorted by request_id
    counts: dict[str, int] = field(default_factory=dict)


def _seconds(s: float) -> timedelta:
    return timedelta(seconds=s)


def reward_maturity(spec: RewardSpec) -> pl.Expr:
    """The mature time of a trajectory's reward row: its event time + the spec's maturity delay (a question's is
    longer: its next turn must mature first)."""
    q_delay, delay = _seconds(spec.maturity_delay_s(question=True)), _seconds(spec.maturity_delay_s())
    return pl.col("event_time") + pl.when(pl.col("response_kind") == "question").then(pl.lit(q_delay)) \
        .otherwise(pl.lit(delay))


def _mature_requests(traj: pl.DataFrame, spec: RewardSpec) -> pl.DataFrame:
    """Non-privacy trajectories with their request time and mature time."""
    return (traj.filter(~pl.col("privacy_mode"))
            .with_columns(request_time=pl.col("event_time"),
                          is_question=pl.col("response_kind") == "question", mature_time=reward_maturity(spec)))


def _next_turns(emit: pl.DataFrame, turns: pl.DataFrame, spec: RewardSpec) -> pl.DataFrame:
    """For each question in `emit`: the next trajectory of the same session within the follow-up window, among
    all `turns` (privacy-mode ones included). A question whose next turn is privacy-mode gets none: that turn's
    outcome is unknown, and the turn after it is not the question's next turn."""
    questions = emit.filter(pl.col("is_question")).select("request_id", "session_id", "request_time")
    if questions.is_empty():
        return pl.DataFrame(schema={"request_id": pl.String, "deferred_to_request_id": pl.String})
    later = turns.select(pl.col("request_id").alias("next_id"), "session_id",
                         pl.col("event_time").alias("next_time"), pl.col("privacy_mode").alias("next_private"))
    w = _seconds(spec.followup_window_s)
    return (questions.join(later, on="session_id")
            .filter((pl.col("next_time") > pl.col("request_time")) & (pl.col("next_time") <= pl.col("request_time") + w))
            .sort("next_time", "next_id")
            .group_by("request_id", maintain_order=True).first()
            .filter(~pl.col("next_private"))
            .select("request_id", pl.col("next_id").alias("deferred_to_request_id")))


def _broken_tool_calls(reqs: pl.DataFrame, results: pl.DataFrame, spec: RewardSpec) -> pl.DataFrame:
    in_traj = reqs.select("request_id", n_tool_calls=pl.col("tool_calls").list.len(),
                          traj_broken=pl.col("tool_calls").list.eval(
                              pl.element().struct.field("status") != "ok").list.sum().fill_null(0))
    w = _seconds(spec.followup_window_s)
    bad = (results.join(reqs.select("request_id", "request_time"), on="request_id")
           .filter(~pl.col("ok") & pl.col("error_kind").is_in(spec.model_caused_tool_errors)
                   & (pl.col("event_time") >= pl.col("request_time"))
                   & (pl.col("event_time") <= pl.col("request_time") + w))
           .group_by("request_id").agg(result_broken=pl.len()))
    return (in_traj.join(bad, on="request_id", how="left")
            .select("request_id", tool_calls=pl.col("n_tool_calls").cast(pl.Int64),
                    broken_tool_calls=(pl.col("traj_broken") + pl.col("result_broken").fill_null(0)).cast(pl.Int64)))


def _in_window(events: pl.DataFrame, reqs: pl.DataFrame, window_s: float) -> pl.DataFrame:
    """Events of the requests in `reqs` whose time is within [request_time, request_time + window]."""
    return (events.join(reqs.select("request_id", "request_time"), on="request_id")
            .filter((pl.col("event_time") >= pl.col("request_time"))
                    & (pl.col("event_time") <= pl.col("request_time") + _seconds(window_s))))


def _persistence(reqs: pl.DataFrame, frames: dict[str, pl.DataFrame], spec: RewardSpec) -> pl.DataFrame:
    """edit_status, edit_lines, persistence, persistence_label per request."""
    applied = _in_window(frames["edit_applied"], reqs, spec.apply_window_s).select(
        "request_id", "workspace_id", "file_id", edit_id="event_id", applied_time="event_time", hunks="hunks")
    lines = (applied.select("request_id", "edit_id", "workspace_id", "file_id", "applied_time",
                            fp=pl.col("hunks").list.eval(pl.element().struct.field("new_fingerprints")).list.eval(
                                pl.element().explode()))
             .explode("fp").drop_nulls("fp"))
    snaps = frames["codebase_snapshot"].select("workspace_id", "file_id", snap_id="event_id", snap_time="event_time")
    # the latest snapshot of the file with applied_time <= snap_time <= applied_time + H
    horizon = _seconds(spec.horizon_s)
    edits = applied.select("request_id", "edit_id", "workspace_id", "file_id", "applied_time")
    matched = (edits.join(snaps, on=["workspace_id", "file_id"])
               .filter((pl.col("snap_time") >= pl.col("applied_time"))
                       & (pl.col("snap_time") <= pl.col("applied_time") + horizon))
               .sort("snap_time", "snap_id")
               .group_by("edit_id", maintain_order=True).last()
               .select("edit_id", "snap_id"))
    snap_fps = (frames["codebase_snapshot"].select(snap_id="event_id", fp="line_fingerprints")
                .join(matched.select("snap_id").unique(), on="snap_id").explode("fp").unique()
                .with_columns(present=pl.lit(True)))
    per_edit = (lines.join(matched, on="edit_id", how="left")
                .join(snap_fps, on=["snap_id", "fp"], how="left")
                .group_by("request_id", "edit_id")
                .agg(n_lines=pl.len(), n_present=pl.col("present").fill_null(False).sum(),
                     has_snap=pl.col("snap_id").is_not_null().any()))
    per_req = (per_edit.group_by("request_id")
               .agg(edit_lines=pl.col("n_lines").sum(),
                    known_lines=pl.col("n_lines").filter(pl.col("has_snap")).sum(),
                    known_present=pl.col("n_present").filter(pl.col("has_snap")).sum()))
    rejected = _rejected_lines(reqs, frames, applied, spec)
    out = (reqs.select("request_id")
           .join(applied.select("request_id").unique().with_columns(was_applied=pl.lit(True)), on="request_id",
                 how="left")
           .join(per_req, on="request_id", how="left")
           .join(rejected, on="request_id", how="left")
           .with_columns(pl.col("was_applied").fill_null(False), pl.col("was_rejected").fill_null(False),
                         pl.col("edit_lines").fill_null(0), pl.col("known_lines").fill_null(0),
                         pl.col("known_present").fill_null(0), pl.col("rejected_lines").fill_null(0)))
    # every edit the request suggested counts: a rejected (or shown, never applied) one persists 0 of its lines
    denominator = pl.col("known_lines") + pl.col("rejected_lines")
    return out.select(
        "request_id",
        edit_status=pl.when("was_applied").then(pl.lit("applied"))
        .when("was_rejected").then(pl.lit("rejected")).otherwise(pl.lit("none")),
        edit_lines=pl.col("edit_lines").cast(pl.Int64),
        persistence=pl.when(pl.col("was_applied") & (denominator > 0))
        .then(pl.col("known_present") / denominator)
        .when(~pl.col("was_applied") & pl.col("was_rejected")).then(pl.lit(0.0))
        .otherwise(pl.lit(None, dtype=pl.Float64)),
        persistence_label=pl.when(pl.col("was_applied") & (denominator > 0)).then(pl.lit("known"))
        .when(pl.col("was_applied") & (pl.col("edit_lines") > 0)).then(pl.lit("unknown"))
        .when(~pl.col("was_applied") & pl.col("was_rejected")).then(pl.lit("known"))
        .otherwise(pl.lit("not_applicable")))


def _rejected_lines(reqs: pl.DataFrame, frames: dict[str, pl.DataFrame], applied: pl.DataFrame,
                    spec: RewardSpec) -> pl.DataFrame:
    """Per request with a file rejected, or shown and not applied, in the apply window: was_rejected and
    rejected_lines, the lines its suggestions showed for those files (a file whose shown lines are unknown counts
    one line), each persisting 0 (rules 2)."""
    shown = _in_window(frames["suggestion_shown"], reqs, spec.apply_window_s)
    files = pl.concat([
        _in_window(frames["edit_rejected"], reqs, spec.apply_window_s).select("request_id", "file_id"),
        shown.select("request_id", "file_id")]).unique()
    files = files.join(applied.select("request_id", "file_id").unique(), on=["request_id", "file_id"], how="anti")
    shown_lines = (shown.select("request_id", "file_id", n=pl.col("hunks").list.eval(
        pl.element().struct.field("new_fingerprints").list.len()).list.sum().fill_null(0))
        .group_by("request_id", "file_id").agg(pl.col("n").max()))
    return (files.join(shown_lines, on=["request_id", "file_id"], how="left")
            .with_columns(n=pl.when(pl.col("n").fill_null(0) > 0).then(pl.col("n")).otherwise(1))
            .group_by("request_id").agg(rejected_lines=pl.col("n").sum())
            .with_columns(was_rejected=pl.lit(True)))


def _followups(reqs: pl.DataFrame, messages: pl.DataFrame, spec: RewardSpec,
               classifier: FollowupClassifier) -> pl.DataFrame:
    first = (_in_window(messages.rename({"previous_request_id": "request_id"}), reqs, spec.followup_window_s)
             .sort("event_time", "event_id").group_by("request_id", maintain_order=True).first()
             .select("request_id", "text"))
    labels = classifier.classify(first["text"])
    first = first.with_columns(dissatisfied=labels["dissatisfied"],
                               question_unnecessary=labels["question_unnecessary"])
    return (reqs.select("request_id").join(first, on="request_id", how="left")
            .select("request_id",
                    followup_status=pl.when(pl.col("dissatisfied").is_null()).then(pl.lit("none"))
                    .when(pl.col("dissatisfied")).then(pl.lit("dissatisfied")).otherwise(pl.lit("satisfied")),
                    question_unnecessary=pl.col("question_unnecessary").fill_null(False)))


def _components(reqs: pl.DataFrame, frames: dict[str, pl.DataFrame], spec: RewardSpec,
                classifier: FollowupClassifier) -> pl.DataFrame:
    w = spec.weights
    out = (reqs.drop("tool_calls").join(_broken_tool_calls(reqs, frames["tool_call_result"], spec), on="request_id")
           .join(_persistence(reqs, frames, spec), on="request_id")
           .join(_followups(reqs, frames["followup_message"], spec, classifier), on="request_id"))
    x = pl.col("completion_tokens") / spec.length_token_budget
    y = pl.col("tool_calls") / spec.length_tool_budget
    e = spec.length_exponent
    return out.with_columns(
        r_persistence=pl.when(pl.col("persistence").is_not_null())
        .then(w.persistence * (2 * pl.col("persistence") - 1)).otherwise(0.0),
        r_followup=pl.when(pl.col("followup_status") == "dissatisfied").then(-w.followup).otherwise(0.0),
        r_broken_tool=pl.when(pl.col("broken_tool_calls") > 0).then(-w.broken_tool).otherwise(0.0),
        r_length=-w.length * (x.cast(pl.Float64).pow(e) + y.cast(pl.Float64).pow(e)) / 2)


def assemble_rewards(frames: dict[str, pl.DataFrame], spec: RewardSpec, classifier: FollowupClassifier,
                     fire_at: datetime | None, fired_before: datetime | None = None) -> Assembled:
    """Reward rows for every buffered request with fired_before < mature_time <= fire_at.

    `frames` holds the buffered events per type (columns as in `schemas.arrow_schema`, deduplicated).
    `fire_at=None` means "everything is mature" (only for tests of the formulas; jobs always pass a time).
    """
    traj = frames["trajectory"]
    requests = _mature_requests(traj.drop(PAYLOAD), spec)
    emit = requests
    if fire_at is not None:
        emit = emit.filter(pl.col("mature_time") <= fire_at)
    if fired_before is not None:
        emit = emit.filter(pl.col("mature_time") > fired_before)
    counts = {"privacy_excluded": int(traj["privacy_mode"].sum()) if fire_at is None else 0}
    if emit.is_empty():
        return Assembled(_EMPTY_ROWS, counts | {"rows": 0})
    nxt = _next_turns(emit, traj.select("request_id", "session_id", "event_time", "privacy_mode"), spec)
    targets = requests.join(nxt.select(request_id="deferred_to_request_id"), on="request_id", how="semi")
    comps = _components(pl.concat([emit.drop("is_question", "mature_time"),
                                   targets.drop("is_question", "mature_time")]).unique("request_id"),
                        frames, spec, classifier)
    inherited = comps.select(deferred_to_request_id="request_id", next_r=pl.col("r_persistence"))
    rows = (emit.select("request_id", "mature_time", "is_question")
            .join(comps, on="request_id")
            .join(nxt, on="request_id", how="left")
            .join(inherited, on="deferred_to_request_id", how="left")
            .with_columns(r_deferral=pl.when(pl.col("is_question"))
                          .then(spec.deferral_discount * pl.col("next_r").fill_null(0.0)
                                - pl.when(pl.col("question_unnecessary")).then(spec.weights.unnecessary_question)
                                .otherwise(0.0))
                          .otherwise(0.0)))
    rows = rows.with_columns(reward_unclipped=pl.col("r_persistence") + pl.col("r_followup") + pl.col("r_broken_tool")
                             + pl.col("r_deferral") + pl.col("r_length"))
    rows = rows.with_columns(reward=pl.col("reward_unclipped").clip(-spec.clip, spec.clip),
                             spec_version=pl.lit(spec.version()))
    # Float results are rounded to 1e-12: polars may vectorize a row's arithmetic differently depending on what
    # else is in the frame (last-bit differences), and a row must not depend on how events were batched.
    floats = [c for c in ROUNDED if c in rows.columns]
    rows = rows.with_columns([pl.col(c).round(12) for c in floats]).sort("request_id")
    first = traj.select("request_id", _i=pl.int_range(pl.len(), dtype=pl.UInt32)).unique("request_id", keep="first")
    at = rows.select("request_id").join(first, on="request_id", how="left", maintain_order="left")["_i"]
    rows = pl.concat([rows, traj.select(PAYLOAD)[at]], how="horizontal")
    rows = rows.select([pl.col(n).cast(_EMPTY_ROWS.schema[n]) for n in _EMPTY_ROWS.columns])
    return Assembled(rows, counts | {"rows": rows.height,
                                     "unknown_labels": int((rows["persistence_label"] == "unknown").sum())})
