"""Demo-like reward rows for the A/B metrics: tests, the dashboard's fixtures and `rtrl bench ab`.

Column-wise (10 million rows in seconds), in the reward table's Arrow schema (schemas/rewards.py), with what the
metrics need to be realistic: users sticky to an arm (a fixed hash of the user, the same in every cycle), users
of very different activity and their own persistence level (so requests of a user are correlated, as in real
traffic), orgs, immature (unknown) persistence labels, latency from a log-normal. The treatment arm's effects
default to Cursor's published A/B result for Composer (edits persisting +2.28 %, dissatisfied follow-ups
-3.13 %, latency -10.3 %). Not the user simulator and not the reward job: reward components are a plausible
stand-in (the scalar `reward` is consistent with the persistence, follow-up, broken-call and length terms, but
not checked against a spec), and the per-token columns are empty lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
CYCLE_HOURS = 5.0


@dataclass(frozen=True)
class Effects:
    """Treatment vs control, relative (multipliers - 1) unless said otherwise."""

    persistence: float = 0.0228
    dissatisfied: float = -0.0313
    latency: float = -0.103
    tokens: float = 0.0
    clarification: float = 0.0
    broken: float = 0.0


@dataclass(frozen=True)
class DemoSpec:
    users: int = 2000
    orgs: int = 7
    control_arm: str = "control"
    treatment_arm: str = "treatment"
    treatment_share: float = 0.5
    control_version: str = "1"
    unknown_rate: float = 0.04            # applied edits whose label is still unknown (no snapshot yet)
    effects: Effects = field(default_factory=Effects)


def _user_table(spec: DemoSpec) -> dict[str, np.ndarray]:
    """Per user, fixed for the whole experiment (seed independent of the cycle): arm, org, activity, skill."""
    rng = np.random.default_rng(12345)
    n = spec.users
    return {"treated": rng.random(n) < spec.treatment_share, "org": rng.integers(0, spec.orgs, n),
            "activity": rng.gamma(1.5, 1.0, n), "skill": rng.normal(0.0, 0.6, n),
            "slow": rng.normal(0.0, 0.15, n)}


def demo_rows(n_rows: int, cycle: int = 0, seed: int = 0, spec: DemoSpec | None = None,
              treatment_version: str | None = None, full_schema: bool = True) -> pl.DataFrame:
    """`n_rows` reward rows of cycle number `cycle` (0-based: request times in that cycle's five hours).

    The treatment arm serves `treatment_version` (default: str(cycle + 2), a new checkpoint each cycle), control
    `spec.control_version`. `full_schema` returns every RewardRow column in its Arrow type (else only the
    columns the metrics read, plus request_id)."""
    spec = spec or DemoSpec()
    users = _user_table(spec)
    rng = np.random.default_rng([seed, cycle])
    n, e = n_rows, spec.effects
    p_user = users["activity"] / users["activity"].sum()
    u = rng.choice(spec.users, size=n, p=p_user)
    treated = users["treated"][u]
    m = np.where(treated, 1.0, 0.0)   # 1 for treatment rows
    uni = rng.random((6, n))

    # response kind: question (clarification), edit, or a plain answer
    p_q = 0.10 * (1 + e.clarification * m)
    kind = np.where(uni[0] < p_q, 2, np.where(uni[0] < p_q + 0.68, 0, 1))          # 0 edit, 1 answer, 2 question
    edit = kind == 0
    applied = edit & (uni[1] < 0.62)
    rejected = edit & ~applied & (uni[1] < 0.88)
    # persistence of applied edits: a user-level skill plus noise on the logit scale, treatment scales the mean
    logit = 0.9 + users["skill"][u] + rng.normal(0.0, 1.0, n)
    persist = np.clip(1 / (1 + np.exp(-logit)) * (1 + e.persistence * m), 0.0, 1.0)
    unknown = applied & (uni[2] < spec.unknown_rate)
    persistence = np.where(applied & ~unknown, np.round(persist * 8) / 8, np.where(rejected, 0.0, np.nan))
    label = np.where(unknown, 1, np.where(applied | rejected, 0, 2))                # 0 known 1 unknown 2 n/a
    # follow-ups: dissatisfied more often after a rejected edit, treatment scales the rate
    p_dis = (0.09 + 0.10 * rejected) * (1 + e.dissatisfied * m)
    follow = np.where(uni[3] < p_dis, 2, np.where(uni[3] < p_dis + 0.30, 1, 0))     # 0 none 1 satisfied 2 dis
    tool_calls = np.where(edit, 1 + (uni[4] < 0.3), (uni[4] < 0.1).astype(np.int64)).astype(np.int64)
    broken = ((uni[5] < 0.02 * (1 + e.broken * m)) & (tool_calls > 0)).astype(np.int64)
    tokens = np.maximum(1, np.round(rng.lognormal(np.log(140), 0.6, n) * (1 + e.tokens * m))).astype(np.int64)
    latency = rng.lognormal(np.log(900) + users["slow"][u], 0.45, n) * (1 + e.latency * m)
    r_p = np.where(label == 0, 2 * np.nan_to_num(persistence) - 1, 0.0)
    r_f = np.where(follow == 2, -0.5, 0.0)
    r_b = np.where(broken > 0, -1.0, 0.0)
    r_l = -0.1 * ((tokens / 512) ** 2 + (tool_calls / 8) ** 2) / 2
    unclipped = r_p + r_f + r_b + r_l
    start = T0 + timedelta(hours=CYCLE_HOURS * cycle)
    offs = np.sort(rng.random(n)) * CYCLE_HOURS * 3600e6

    tv = treatment_version or str(cycle + 2)
    user_ids = pl.Series([f"u{j:06d}" for j in range(spec.users)])
    orgs = pl.Series([f"org-{k}" for k in range(spec.orgs)])
    idx = pl.Series(u, dtype=pl.UInt32)
    req_t = pl.Series(offs.astype(np.int64)).cast(pl.Duration("us")) + pl.lit(start)
    df = pl.DataFrame({
        "policy_version": pl.Series(np.where(treated, tv, spec.control_version)),
        "arm": pl.Series(np.where(treated, spec.treatment_arm, spec.control_arm)),
        "user_id": user_ids.gather(idx),
        "org_id": orgs.gather(pl.Series(users["org"][u], dtype=pl.UInt32)),
    })
    df = df.with_columns(
        request_id=pl.lit(f"c{cycle}-") + pl.int_range(pl.len()).cast(pl.String).str.pad_start(9, "0"),
        request_time=pl.select(req_t).to_series().dt.replace_time_zone("UTC"))
    df = df.with_columns(
        mature_time=pl.col("request_time") + pl.duration(minutes=45),
        response_kind=pl.Series(np.array(["edit", "answer", "question"])[kind]),
        completion_tokens=pl.Series(tokens), latency_ms=pl.Series(np.round(latency, 1)),
        tool_calls=pl.Series(tool_calls), broken_tool_calls=pl.Series(broken),
        edit_status=pl.Series(np.where(applied, "applied", np.where(rejected, "rejected", "none"))),
        edit_lines=pl.Series(np.where(applied, 4, 0).astype(np.int64)),
        persistence=pl.Series(persistence).fill_nan(None),
        persistence_label=pl.Series(np.array(["known", "unknown", "not_applicable"])[label]),
        followup_status=pl.Series(np.array(["none", "satisfied", "dissatisfied"])[follow]),
        question_unnecessary=pl.lit(False),
        r_persistence=pl.Series(r_p), r_followup=pl.Series(r_f), r_broken_tool=pl.Series(r_b),
        r_length=pl.Series(r_l), reward_unclipped=pl.Series(unclipped), reward=pl.Series(np.clip(unclipped, -2, 2)))
    if not full_schema:
        return df
    return _full(df)


def _full(df: pl.DataFrame) -> pl.DataFrame:
    from schemas.arrow import model_arrow_schema
    from schemas.rewards import RewardRow

    schema = model_arrow_schema(RewardRow)
    df = df.with_columns(
        workspace_id=pl.lit("ws-") + pl.col("user_id"), session_id=pl.lit("s-") + pl.col("user_id"),
        prompt_token_ids=pl.lit([], dtype=pl.List(pl.Int64)), completion_token_ids=pl.lit([], dtype=pl.List(pl.Int64)),
        behaviour_logprobs=pl.lit([], dtype=pl.List(pl.Float64)), temperature=pl.lit(1.0), top_p=pl.lit(1.0),
        top_k=pl.lit(-1, pl.Int64), prompt_tokens=pl.lit(64, pl.Int64),
        deferred_to_request_id=pl.lit(None, pl.String), group_id=pl.lit(None, pl.String), cut_short=pl.lit(False),
        task_id=pl.lit(None, pl.String),
        r_deferral=pl.lit(0.0), spec_version=pl.lit("demo"))
    return pl.from_arrow(df.select(schema.names).to_arrow().cast(schema))


def write_demo_table(root: str | Path, cycle_id: str, rows: pl.DataFrame) -> list[Path]:
    """Write rows as the reward job does: `<root>/policy_version=<v>/window=<cycle_id>/part-0.parquet`."""
    out = []
    for (version,), part in sorted(rows.partition_by("policy_version", as_dict=True).items()):
        d = Path(root) / f"policy_version={version}" / f"window={cycle_id}"
        d.mkdir(parents=True, exist_ok=True)
        part.sort("request_id").write_parquet(d / "part-0.parquet", compression="zstd")
        out.append(d / "part-0.parquet")
    return out
