"""Valid reward rows (built from the spec's formulas by hand) and valid events (from schemas/fixtures), plus
small frame editors for breaking exactly one rule."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from pipelines.rewards.spec import RewardSpec
from schemas import Event, parse_event, to_arrow
from schemas.arrow import model_arrow_schema
from schemas.rewards import RewardRow

FIXTURES = Path(__file__).parents[3] / "schemas" / "fixtures"
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=timezone.utc)


def reward_row(i: int, spec: RewardSpec, *, label: str = "known", p: float | None = 0.75, edit: str = "applied",
               followup: str = "none", tool_calls: int = 1, broken: int = 0, tokens: int = 3,
               completion_tokens: int | None = None, r_deferral: float = 0.0, **overrides: Any) -> dict:
    """One RewardRow (as a dict) whose components follow `spec` (pipelines/rewards/spec.py docstring);
    `overrides` replace any field, components before the sums are taken (so the sums stay consistent)."""
    w = spec.weights
    completion_tokens = tokens if completion_tokens is None else completion_tokens
    r_persistence = (w.persistence * (2 * p - 1) if label == "known"
                     else -w.persistence if edit == "rejected" else 0.0)
    x, y = completion_tokens / spec.length_token_budget, tool_calls / spec.length_tool_budget
    components = {
        "r_persistence": r_persistence,
        "r_followup": -w.followup if followup == "dissatisfied" else 0.0,
        "r_broken_tool": -w.broken_tool if broken > 0 else 0.0,
        "r_deferral": r_deferral,
        "r_length": -w.length * (x ** spec.length_exponent + y ** spec.length_exponent) / 2,
    }
    components.update({k: overrides.pop(k) for k in list(overrides) if k in components})
    unclipped = sum(components.values())
    t = T0 + timedelta(minutes=i)
    row = dict(
        request_id=f"r-{i}", policy_version="3", arm="treatment", user_id="u-1", org_id="org-a",
        workspace_id="ws-1", session_id="s-1", request_time=t, mature_time=t + timedelta(
            seconds=spec.maturity_delay_s()), response_kind="edit", prompt_token_ids=[1, 2],
        completion_token_ids=list(range(10, 10 + tokens)), behaviour_logprobs=[-0.5] * tokens, temperature=1.0,
        top_p=1.0, top_k=-1, prompt_tokens=2, completion_tokens=completion_tokens, latency_ms=80.0,
        tool_calls=tool_calls, broken_tool_calls=broken, edit_status=edit, edit_lines=3 if edit == "applied" else 0,
        persistence=p, persistence_label=label, followup_status=followup, question_unnecessary=False,
        deferred_to_request_id=None, **components, reward_unclipped=unclipped,
        reward=min(max(unclipped, -spec.clip), spec.clip), spec_version=spec.version())
    row.update(overrides)
    return row


def valid_reward_rows(spec: RewardSpec) -> list[dict]:
    """A small table covering every branch: kept / reverted / unknown / no edit, follow-ups, broken tools,
    a clipped reward, a question with a deferred outcome."""
    rows = [
        reward_row(0, spec),
        reward_row(1, spec, label="not_applicable", p=None, edit="rejected", followup="dissatisfied",
                   tool_calls=2, broken=1),  # -1 - 0.5 - 1 - length: clipped to -clip
        reward_row(2, spec, label="unknown", p=None, followup="satisfied", tool_calls=0),
        reward_row(3, spec, label="not_applicable", p=None, edit="none", tool_calls=0, response_kind="question",
                   r_deferral=0.8 * 0.5, deferred_to_request_id="r-0"),
        reward_row(4, spec, p=1.0, tokens=500, tool_calls=12, broken=2),  # past both length budgets
    ]
    for r in rows:
        RewardRow.model_validate(r)  # the helper itself must make schema-valid rows
    return rows


def reward_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=model_arrow_schema(RewardRow)))


def fixture_event(event_type: str, **fields: Any) -> Event:
    """The newest fixture of `event_type` with a fresh event_id, received 1 s after event_time."""
    newest = max((FIXTURES / event_type).glob("v*.json"), key=lambda p: int(p.stem[1:]))
    d = json.loads(newest.read_text())
    d.update(event_id=str(uuid.uuid4()), received_time=(T0 + timedelta(seconds=1)).isoformat(),
             event_time=T0.isoformat())
    d.update(fields)
    return parse_event(d)


def valid_events() -> list[Event]:
    """One event of every type, plus privacy-mode trajectory, follow-up and tool result (content emptied)."""
    types = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    events = [fixture_event(t) for t in types]
    events += [fixture_event("trajectory", request_id="r-private").without_content(),
               fixture_event("followup_message").without_content(),
               fixture_event("tool_call_result").without_content()]
    return events


def events_frame(events: list[Event]) -> pl.DataFrame:
    """The all-types frame, shaped like `read_events` (union of columns, nulls where a type has none)."""
    by_type: dict[str, list[Event]] = {}
    for e in events:
        by_type.setdefault(e.event_type, []).append(e)
    frames = [pl.from_arrow(to_arrow(es, t)) for t, es in sorted(by_type.items())]
    return pl.concat(frames, how="diagonal_relaxed")


def edit(frame: pl.DataFrame, where: dict[str, Any], **values: Any) -> pl.DataFrame:
    """The frame with `values` set on the rows matching every `where` column == value (at least one row)."""
    rows = frame.to_dicts()
    hit = 0
    for r in rows:
        if all(r.get(k) == v for k, v in where.items()):
            r.update(values)
            hit += 1
    assert hit, f"no row matches {where}"
    return pl.DataFrame(rows, schema=frame.schema)
