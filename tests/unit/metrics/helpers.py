"""Small reward-row fixtures for the metric tests: only the columns the metrics read, values set per row."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=timezone.utc)


def row(user: str, arm: str = "control", *, version: str = "1", org: str = "org-a", kind: str = "edit",
        persistence: float | None = 1.0, label: str = "known", followup: str = "none", broken: int = 0,
        tokens: int = 100, latency: float = 500.0, reward: float = 0.0, minute: int = 0,
        needless: bool = False) -> dict:
    t = T0 + timedelta(minutes=minute)
    return {"arm": arm, "policy_version": version, "org_id": org, "user_id": user, "request_time": t,
            "mature_time": t + timedelta(minutes=45), "response_kind": kind, "completion_tokens": tokens,
            "latency_ms": latency, "broken_tool_calls": broken, "persistence": persistence,
            "persistence_label": label, "followup_status": followup, "question_unnecessary": needless,
            "reward": reward}


def frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={
        "arm": pl.String, "policy_version": pl.String, "org_id": pl.String, "user_id": pl.String,
        "request_time": pl.Datetime("us", "UTC"), "mature_time": pl.Datetime("us", "UTC"),
        "response_kind": pl.String, "completion_tokens": pl.Int64, "latency_ms": pl.Float64,
        "broken_tool_calls": pl.Int64, "persistence": pl.Float64, "persistence_label": pl.String,
        "followup_status": pl.String, "question_unnecessary": pl.Boolean, "reward": pl.Float64})


def ratio_rows(arm: str, users: list[tuple[int, int]], prefix: str) -> list[dict]:
    """Rows whose dissatisfied follow-ups give user u the sums (Y_u, N_u): N_u rows, Y_u of them dissatisfied."""
    out = []
    for i, (y, n) in enumerate(users):
        for j in range(n):
            out.append(row(f"{prefix}{i}", arm, followup="dissatisfied" if j < y else "none", minute=j))
    return out
