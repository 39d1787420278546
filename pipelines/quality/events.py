"""The events suite: is an archived event log fit to compute rewards from? (docs/rewards.md)

Runs on the frame of one event type or on the all-types frame of `pipelines.archive.reader.read_events` (columns
a type does not have are null there). Rules that read columns the frame does not have (e.g. trajectory rules on
a snapshot-only frame) are left out; missing envelope columns fail `envelope_matches_schema`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa

from pipelines.quality.config import QualityConfig
from pipelines.quality.expectations import (Expectation, between, conform, holds, in_set, not_null,
                                            row_count_between, schema, unique)
from pipelines.quality.result import SuiteResult
from pipelines.quality.runner import run_suite
from schemas import CURRENT_VERSIONS, EVENT_TYPES, Event, arrow_schema

IDS = ("user_id", "org_id", "workspace_id", "session_id")
CONTENT_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(f for cls in EVENT_TYPES.values() for f in cls.CONTENT_FIELDS))
"""Every field some event type declares as trainable content: empty in a privacy-mode row."""


REQUIRED = tuple(n for n in Event.model_fields if n not in ("received_time", "client_version"))
"""Envelope columns every event frame must have (received_time may be absent: the collector sets it)."""


def _required_schema() -> pa.Schema:
    any_type = arrow_schema(next(iter(EVENT_TYPES)))
    return pa.schema([any_type.field(n) for n in REQUIRED])


def _optional_schema() -> pa.Schema:
    """Columns the rules read when present, with their types (from the first event type that has each)."""
    fields: dict[str, pa.Field] = {}
    wanted = ("received_time", "completion_token_ids", "behaviour_logprobs", *CONTENT_FIELDS)
    for t in EVENT_TYPES:
        for f in arrow_schema(t):
            if f.name in wanted:
                fields.setdefault(f.name, f)
    return pa.schema(list(fields.values()))


def _is_empty(column: str, dtype: pl.DataType) -> pl.Expr:
    c = pl.col(column)
    if isinstance(dtype, pl.List):
        return c.is_null() | (c.list.len() == 0)
    if dtype in (pl.String, pl.Utf8):
        return c.is_null() | (c.str.len_bytes() == 0)
    return c.is_null()


def events_expectations(frame: pl.DataFrame, problems: dict[str, str], cfg: QualityConfig) -> list[Expectation]:
    """The events suite for a frame with these columns (already conformed; `problems` from `conform`)."""
    cols = set(frame.columns)
    privacy = pl.col("privacy_mode").fill_null(False)
    trajectory_content = (pl.col("event_type") == "trajectory") & ~privacy
    exps = [schema({c: why for c, why in problems.items()}, rule="envelope_matches_schema",
                   description="every envelope column is present with its Arrow type")]
    if cfg.events_min_rows:
        exps.append(row_count_between(cfg.events_min_rows, rule="enough_events",
                                      description=f"at least {cfg.events_min_rows} events"))
    exps += [
        not_null("event_id"),
        unique("event_id", description="event_id is the idempotency key: a duplicate is a retry that was not "
                                       "deduplicated"),
        not_null("event_type"),
        in_set("event_type", EVENT_TYPES, rule="event_type_known"),
        not_null("schema_version"),
        between("schema_version", 1, None, rule="schema_version_at_least_1"),
        holds("schema_version_not_newer_than_known",
              (pl.col("schema_version") <= pl.col("event_type").replace_strict(
                  CURRENT_VERSIONS, default=None, return_dtype=pl.Int64)).fill_null(True),
              ("event_id", "event_type", "schema_version"),
              "schema_version <= the current version of its event type (unknown types and null versions are "
              "judged by their own rules)"),
        *[not_null(c) for c in IDS],
        not_null("event_time"),
        *_time_rules(frame, cfg),
    ]
    for f in CONTENT_FIELDS:
        if f in cols:
            exps.append(holds(f"privacy_rows_have_no_{f}", ~privacy | _is_empty(f, frame.schema[f]),
                              ("event_id", "event_type", "privacy_mode", f),
                              f"a privacy-mode row carries no content: {f} is empty"))
    if {"behaviour_logprobs", "completion_token_ids"} <= cols:
        exps.append(holds(
            "logprobs_match_completion_tokens",
            ~trajectory_content | (pl.col("behaviour_logprobs").list.len().fill_null(0)
                                   == pl.col("completion_token_ids").list.len().fill_null(0)),
            ("event_id", "event_type", "privacy_mode", "completion_token_ids", "behaviour_logprobs"),
            "trajectory (non-privacy): one behaviour log-prob per completion token"))
    if "behaviour_logprobs" in cols:
        exps.append(holds("behaviour_logprobs_non_positive",
                          pl.col("behaviour_logprobs").list.eval(pl.element() <= 0).list.all().fill_null(True),
                          ("event_id", "behaviour_logprobs"),
                          "every behaviour log-prob is <= 0 (a NaN fails)"))
    return exps


def _time_rules(frame: pl.DataFrame, cfg: QualityConfig) -> list[Expectation]:
    t = pl.col("event_time")
    floor = holds("event_time_not_before_min_event_time", (t >= cfg.min_event_time).fill_null(True),
                  ("event_id", "event_time"),
                  f"event_time >= {cfg.min_event_time.isoformat()} (min_event_time)")
    if "received_time" not in frame.columns:
        return [floor]
    r = pl.col("received_time")
    age, skew = timedelta(seconds=cfg.max_event_age_s), timedelta(seconds=cfg.max_clock_skew_s)
    inputs = ("event_id", "event_time", "received_time")
    # A null event_time is judged by event_time_not_null; with no received_time in the whole batch there is no
    # reference and only the floor applies.
    return [
        floor,
        holds("event_time_not_too_long_before_received_time",
              (t >= r.fill_null(r.min()) - age).fill_null(True),
              inputs, f"event_time >= received_time - max_event_age_s ({cfg.max_event_age_s:g} s); rows without "
                      "received_time use the batch's earliest received_time"),
        holds("event_time_not_after_received_time_plus_skew",
              (t <= r.fill_null(r.max()) + skew).fill_null(True),
              inputs, f"event_time <= received_time + max_clock_skew_s ({cfg.max_clock_skew_s:g} s): not in the "
                      "future; rows without received_time use the batch's latest received_time"),
    ]


def check_events(frame: pl.DataFrame | pa.Table, cfg: QualityConfig | None = None, name: str = "events"
                 ) -> SuiteResult:
    """Run the events suite on a frame of archived events (one type, or all types as `read_events` gives)."""
    cfg = cfg or QualityConfig()
    if isinstance(frame, pa.Table):
        frame = pl.from_arrow(frame)
    frame, problems = conform(frame, _required_schema(), _optional_schema())
    return run_suite(name, frame, events_expectations(frame, problems, cfg), key="event_id", examples=cfg.examples)


def check_archive(root: str | Path, start: datetime | None = None, end: datetime | None = None,
                  cfg: QualityConfig | None = None) -> tuple[SuiteResult, pl.DataFrame]:
    """Read the event log (`start <= event_time < end`, all types) and run the events suite on it. Returns the
    result and the frame (its trajectories tell `check_rewards` which requests were privacy-mode)."""
    from pipelines.archive.reader import read_events

    events = read_events(root, start=start, end=end)
    return check_events(events, cfg), events
