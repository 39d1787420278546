"""Regressions found by `rtrl bench fuzz`: model output and endpoint answers that used to raise from the
tool-call protocol's parsers (a 500 in serving, a crashed simulated user) now become broken calls with a reason."""

from __future__ import annotations

import json

import pytest

from schemas.events import ToolCallStatus, Trajectory
from schemas.tool_protocol import CLOSE, OPEN, ToolCall, from_openai_tool_calls, parse_response, to_openai_tool_calls


@pytest.mark.parametrize("body", [
    '{"name": "\\ud800", "arguments": {}}',                                                     # name
    '{"name": "edit_file", "arguments": {"path": "\\udfff", "old": "a", "new": "b"}}',            # an argument
    "[" * 50_000 + "]" * 50_000,                                                                 # nesting
])
def test_a_call_that_decodes_to_lone_surrogates_or_nests_too_deep_is_a_parse_error(body):
    p = parse_response(f"{OPEN}\n{body}\n{CLOSE}")
    [rec] = p.records
    assert rec.status is ToolCallStatus.parse_error and rec.error and p.calls == []
    json.dumps(to_openai_tool_calls(p.calls, "r"), ensure_ascii=False).encode("utf-8")  # serving can answer


def test_raw_lone_surrogates_in_the_text_do_not_crash_and_records_fit_a_trajectory():
    p = parse_response(f'{OPEN}{{"name": "x\ud800y", "argu\udcff{CLOSE} trailing \ud83d?')
    assert p.records and all(r.status is not ToolCallStatus.ok for r in p.records)
    Trajectory(event_id=Trajectory.new_id(), event_time="2026-11-01T00:00:00Z", user_id="u", org_id="o",
               workspace_id="w", session_id="s", client_version="c", request_id="r", policy_version="1", arm="a",
               tool_calls=p.records, latency_ms=1.0, prompt_tokens=0, completion_tokens=0)


@pytest.mark.parametrize("calls", [
    True, "edit_file", 3, ["not a call"], [{"id": "c"}], [{"function": None}], [{"function": {"name": "lint"}}],
    [{"function": {"name": "lint", "arguments": "[" * 50_000}}],
    [{"function": {"name": "lint", "arguments": '{"path": "\\ud800"}'}}],
])
def test_malformed_openai_tool_calls_raise_value_error_as_documented(calls):
    with pytest.raises(ValueError):
        from_openai_tool_calls(calls)


def test_well_formed_openai_tool_calls_still_parse():
    call = ToolCall("edit_file", {"path": "a.py", "old": "x", "new": "y"})
    assert from_openai_tool_calls(to_openai_tool_calls([call], "r")) == [call]
    assert from_openai_tool_calls(None) == []
