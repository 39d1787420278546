"""Benchmark the suites: `python -m pipelines.quality.bench [--rows N]` prints one JSON object.

`synthetic_rewards(n, spec)` makes a valid reward table (every component computed by the spec's formulas), also
used by tests; events come from `schemas.samples.sample_events`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import polars as pl
import pyarrow as pa

from pipelines.rewards.spec import RewardSpec
from schemas.arrow import model_arrow_schema
from schemas.rewards import RewardRow

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def synthetic_rewards(n: int, spec: RewardSpec | None = None, seed: int = 0, max_tokens: int = 64) -> pl.DataFrame:
    """`n` valid reward rows for `spec` (persistence known/unknown/not applicable, follow-ups, broken tools)."""
    spec = spec or RewardSpec()
    w = spec.weights
    rng = np.random.default_rng(seed)
    k = rng.integers(1, max_tokens + 1, n)
    offsets = np.concatenate([[0], np.cumsum(k)])
    tokens = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(rng.integers(0, 4096, offsets[-1])))
    logprobs = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(-rng.exponential(1.0, offsets[-1])))
    prompt = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32) * 4),
                                      pa.array(rng.integers(0, 4096, 4 * n)))
    tool_calls = rng.integers(0, 5, n)
    broken = np.minimum(rng.binomial(1, 0.1, n) * rng.integers(1, 3, n), tool_calls)
    label = rng.choice(["known", "unknown", "not_applicable"], n, p=[0.6, 0.1, 0.3])
    p = np.where(label == "known", rng.random(n), np.nan)
    edit = np.where(label == "not_applicable", rng.choice(["rejected", "none"], n), "applied")
    followup = rng.choice(["none", "satisfied", "dissatisfied"], n, p=[0.5, 0.3, 0.2])
    r_persistence = np.where(label == "known", w.persistence * (2 * p - 1), np.where(edit == "rejected",
                                                                                      -w.persistence, 0.0))
    r_followup = np.where(followup == "dissatisfied", -w.followup, 0.0)
    r_broken = np.where(broken > 0, -w.broken_tool, 0.0)
    r_deferral = np.zeros(n)
    x, y = k / spec.length_token_budget, tool_calls / spec.length_tool_budget
    r_length = -w.length * (x ** spec.length_exponent + y ** spec.length_exponent) / 2
    unclipped = r_persistence + r_followup + r_broken + r_deferral + r_length
    request_time = [T0 + timedelta(seconds=int(s)) for s in np.arange(n) * 2]
    delay = timedelta(seconds=spec.maturity_delay_s())
    cols = {
        "request_id": [f"r-{i}" for i in range(n)], "policy_version": ["3"] * n,
        "arm": rng.choice(["control", "treatment"], n), "user_id": [f"u{i % 200}" for i in range(n)],
        "org_id": [f"org{i % 7}" for i in range(n)], "workspace_id": [f"ws{i % 200}" for i in range(n)],
        "session_id": [f"s{i % 1000}" for i in range(n)], "request_time": request_time,
        "mature_time": [t + delay for t in request_time], "response_kind": ["edit"] * n,
        "group_id": pa.nulls(n, pa.string()), "cut_short": np.zeros(n, bool),
        "prompt_token_ids": prompt, "completion_token_ids": tokens, "behaviour_logprobs": logprobs,
        "temperature": np.ones(n), "top_p": np.ones(n), "top_k": np.full(n, -1), "prompt_tokens": np.full(n, 4),
        "completion_tokens": k, "latency_ms": rng.uniform(50, 900, n), "tool_calls": tool_calls,
        "broken_tool_calls": broken, "edit_status": edit, "edit_lines": np.where(edit == "applied", 3, 0),
        "persistence": pa.array(p, from_pandas=True), "persistence_label": label, "followup_status": followup,
        "question_unnecessary": np.zeros(n, bool), "deferred_to_request_id": pa.nulls(n, pa.string()),
        "task_id": pa.nulls(n, pa.string()),
        "r_persistence": r_persistence, "r_followup": r_followup, "r_broken_tool": r_broken,
        "r_deferral": r_deferral, "r_length": r_length, "reward_unclipped": unclipped,
        "reward": np.clip(unclipped, -spec.clip, spec.clip), "spec_version": [spec.version()] * n,
    }
    schema = model_arrow_schema(RewardRow)
    table = pa.table({f.name: pa.array(cols[f.name], f.type) if not isinstance(cols[f.name], pa.Array)
                      else cols[f.name].cast(f.type) for f in schema}, schema=schema)
    return pl.from_arrow(table)


def synthetic_events(n: int, seed: int = 0) -> pl.DataFrame:
    """`n` sample events of every type as one all-types frame (like `read_events`), received 1 s after sent."""
    from schemas import to_arrow
    from schemas.samples import sample_events

    events = sample_events(n, seed=seed)
    for e in events:
        e.received_time = e.event_time + timedelta(seconds=1)
    by_type: dict[str, list] = {}
    for e in events:
        by_type.setdefault(e.event_type, []).append(e)
    frames = [pl.from_arrow(to_arrow(es, t)) for t, es in sorted(by_type.items())]
    return pl.concat(frames, how="diagonal_relaxed")


def run(rows: int) -> dict:
    from pipelines.quality import check_events, check_rewards
    from pipelines.quality.runner import _context

    _context()  # import GX once, outside the timings
    rewards = synthetic_rewards(rows)
    t0 = time.perf_counter()
    r = check_rewards(rewards, trajectories=None, privacy_request_ids=[f"p-{i}" for i in range(1000)])
    rewards_s = time.perf_counter() - t0
    events = synthetic_events(rows)
    t0 = time.perf_counter()
    e = check_events(events)
    events_s = time.perf_counter() - t0
    return {"benchmark": "quality", "cpus": os.cpu_count(), "rows": rows,
            "rewards": {"seconds": round(rewards_s, 3), "rules": len(r.results), "success": r.success},
            "events": {"seconds": round(events_s, 3), "rules": len(e.results), "success": e.success}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=100_000)
    print(json.dumps(run(ap.parse_args().rows)))


if __name__ == "__main__":
    main()
