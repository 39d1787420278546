"""A coherent synthetic event log for the reward benchmark, built column-wise (millions of events in seconds).

Per request: a trajectory (10% question-only, 5% with a broken tool call, 2% cut short, no n > 1 groups), a
suggestion (80%), applied (60%, within a minute) or rejected (20%), two snapshots of the edited file (the horizon
one keeps 0-4 of the 4 lines), a follow-up (50%), a tool-call result (10% errors). About 6 events per request.
Not the user simulator (instrumentation/simulator/): no behaviour, only shapes and joins that exercise every branch of the reward
spec.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import polars as pl

from pipelines.rewards.frames import conform, empty_frame
from schemas.events import EVENT_TYPES, Trajectory

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
TEXTS = ["thanks", "that is wrong, revert it", "now add a test", "why are you asking? just do it", "ok"]


def _uuid(kind: int, n: int) -> pl.Series:
    """Deterministic UUID-shaped event ids: kind in the 4th group, a counter in the last."""
    return pl.Series([f"00000000-0000-4000-{0x8000 + kind:04x}-"] * n) + pl.int_range(0, n, eager=True).cast(
        pl.String).str.pad_start(12, "0")


def _envelope(req: pl.DataFrame, kind: int, event_type: str, dt_s: float) -> pl.DataFrame:
    n = req.height
    return req.select(
        event_id=_uuid(kind, n), event_type=pl.lit(event_type), schema_version=pl.lit(1, pl.Int64),
        event_time=pl.col("t") + pl.duration(milliseconds=dt_s * 1000),
        received_time=pl.lit(None, pl.Datetime("us", "UTC")), user_id="user_id", org_id="org_id",
        workspace_id="workspace_id", session_id="session_id", privacy_mode=pl.lit(False),
        client_version=pl.lit("synthetic/1"), request_id="request_id")


def _fps(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.String).str.pad_start(16, "0")


def synthetic_frames(n_requests: int, seed: int = 0, spacing_ms: int = 40) -> dict[str, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    n = n_requests
    ws = max(1, n // 25)
    idx = np.arange(n)
    u = rng.random((8, n))
    req = pl.DataFrame({
        "i": idx, "request_id": pl.Series(["r"] * n) + pl.Series(idx).cast(pl.String),
        "workspace_id": pl.Series(["ws"] * n) + pl.Series(idx % ws).cast(pl.String),
        "session_id": pl.Series(["s"] * n) + pl.Series(idx % ws).cast(pl.String) + "-" + pl.Series(
            idx // (ws * 8)).cast(pl.String),
        "user_id": pl.Series(["u"] * n) + pl.Series(idx % ws).cast(pl.String),
        "org_id": pl.Series(["o"] * n) + pl.Series(idx % 7).cast(pl.String),
        "t": pl.Series([T0] * n) + pl.Series(idx * spacing_ms).cast(pl.Duration("ms")),
        "tokens": rng.integers(10, 500, n), "question": u[0] < 0.10, "broken": u[1] < 0.05,
        "shown": u[2] < 0.80, "applied": u[3] < 0.75, "keep": rng.integers(0, 5, n),
        "followup": u[4] < 0.5, "text": rng.integers(0, len(TEXTS), n), "tool_ok": u[5] < 0.9,
        "cut_short": u[6] < 0.02,
    }).with_columns(pl.col("t").dt.replace_time_zone("UTC"), file_id=pl.lit("f") + (pl.col("i") % 13).cast(pl.String))
    frames: dict[str, pl.DataFrame] = {}
    traj = _envelope(req, 1, "trajectory", 0.0).with_columns(
        schema_version=pl.lit(Trajectory.SCHEMA_VERSION, pl.Int64), policy_version=pl.lit("1"),
        arm=pl.when(req["i"] % 2 == 0).then(pl.lit("control")).otherwise(pl.lit("treatment")),
        prompt_token_ids=pl.int_ranges(0, 64), completion_token_ids=pl.int_ranges(0, req["tokens"]),
        behaviour_logprobs=pl.int_ranges(0, req["tokens"]).list.eval(pl.element().cast(pl.Float64) * -0.001),
        tool_calls=pl.concat_list(pl.struct(name=pl.lit("edit_file"), status=pl.when(req["broken"])
                                            .then(pl.lit("parse_error")).otherwise(pl.lit("ok")),
                                            error=pl.lit(""))),
        latency_ms=pl.lit(120.0), prompt_tokens=pl.lit(64, pl.Int64), completion_tokens=req["tokens"].cast(pl.Int64),
        temperature=pl.lit(1.0), top_p=pl.lit(1.0), top_k=pl.lit(-1, pl.Int64),
        response_kind=pl.when(req["question"]).then(pl.lit("question")).otherwise(pl.lit("edit")),
        group_id=pl.lit(None, pl.String), cut_short=req["cut_short"])
    frames["trajectory"] = traj
    edits = req.filter(pl.col("shown") & ~pl.col("question"))
    lines = pl.concat_list([_fps(pl.col("i") * 8 + k) for k in range(4)])
    hunks = pl.concat_list(pl.struct(old_start=pl.lit(1, pl.Int64), old_count=pl.lit(1, pl.Int64),
                                     new_fingerprints=lines))
    frames["suggestion_shown"] = _envelope(edits, 2, "suggestion_shown", 1.0).with_columns(
        file_id=edits["file_id"], hunks=edits.select(hunks).to_series())
    applied = edits.filter(pl.col("applied"))
    frames["edit_applied"] = _envelope(applied, 3, "edit_applied", 20.0).with_columns(
        file_id=applied["file_id"], hunks=applied.select(hunks).to_series())
    rejected = edits.filter(~pl.col("applied"))
    frames["edit_rejected"] = _envelope(rejected, 4, "edit_rejected", 15.0).with_columns(
        file_id=rejected["file_id"], reason=pl.lit("user"))
    snaps = []
    for k, (dt, keep) in enumerate(((300.0, pl.lit(4)), (1500.0, pl.col("keep")))):
        kept = pl.concat_list([_fps(pl.col("i") * 8 + j) for j in range(4)]).list.head(keep)
        other = pl.concat_list([_fps(pl.col("i") * 8 + 4 + j) for j in range(3)])
        s = _envelope(applied, 5 + k, "codebase_snapshot", dt).with_columns(
            file_id=applied["file_id"], trigger=pl.lit("save"),
            line_fingerprints=applied.select(pl.concat_list(kept, other)).to_series())
        snaps.append(s.with_columns(event_id=_uuid(5 + k, s.height)))
    frames["codebase_snapshot"] = pl.concat(snaps)
    fol = req.filter(pl.col("followup"))
    frames["followup_message"] = _envelope(fol, 7, "followup_message", 30.0).with_columns(
        previous_request_id=fol["request_id"], text=fol["text"].replace_strict(range(len(TEXTS)), TEXTS))
    frames["tool_call_result"] = _envelope(req, 8, "tool_call_result", 10.0).with_columns(
        tool=pl.lit("run_terminal"), call_index=pl.lit(0, pl.Int64), ok=req["tool_ok"],
        error_kind=pl.when(req["tool_ok"]).then(pl.lit("none")).otherwise(pl.lit("tool_error")),
        error_message=pl.when(req["tool_ok"]).then(pl.lit("")).otherwise(pl.lit("exit status 1")))
    return {t: conform(frames[t].with_columns(event_date=pl.col("event_time").dt.date()), t) if t in frames
            else empty_frame(t) for t in EVENT_TYPES}
