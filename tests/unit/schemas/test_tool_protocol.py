"""The tool-call protocol's strict parser: valid calls, every way a call can be broken, response kinds."""

import json

import pytest

from schemas.events import ResponseKind, ToolCallStatus
from schemas.tool_protocol import (TOOLS, ToolCall, from_openai_tool_calls, openai_tools, parse_response,
                                   to_openai_tool_calls)

EDIT = ToolCall("edit_file", {"path": "a.py", "old": "X = 1", "new": "X = 2"})


def test_a_canonical_call_parses_back_to_itself_as_an_edit():
    r = parse_response(EDIT.text())
    assert r.kind is ResponseKind.edit and r.calls == [EDIT] and r.broken == 0 and r.content == ""
    assert [x.status for x in r.records] == [ToolCallStatus.ok]


def test_several_calls_keep_their_order_and_a_read_only_response_is_an_answer():
    read = ToolCall("read_file", {"path": "a.py"})
    r = parse_response(read.text() + "\n" + EDIT.text())
    assert r.calls == [read, EDIT] and r.kind is ResponseKind.edit
    assert parse_response(read.text()).kind is ResponseKind.answer


def test_plain_text_is_an_answer_and_text_ending_in_a_question_mark_is_a_question():
    assert parse_response("Done, nothing to change.").kind is ResponseKind.answer
    q = parse_response("Which helper do you mean, load or save?  \n")
    assert q.kind is ResponseKind.question and q.records == [] and q.content.startswith("Which")


@pytest.mark.parametrize("text, status, why", [
    ('<tool_call>\n{"name": "edit_file", "arguments": {"path": "a.py"\n</tool_call>', "parse_error", "not valid JSON"),
    ('<tool_call>\n{"name": "edit_file", "arguments": {}}', "parse_error", "without </tool_call>"),
    ('<tool_call>\n["edit_file"]\n</tool_call>', "parse_error", '"name" and "arguments"'),
    ('<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>', "validation_error", "unknown tool 'rm_rf'"),
    ('<tool_call>\n{"name": "edit_file", "arguments": {"path": "a.py", "old": "x"}}\n</tool_call>',
     "validation_error", "missing argument(s) new"),
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py", "mode": "r"}}\n</tool_call>',
     "validation_error", "unexpected argument(s) mode"),
    ('<tool_call>\n{"name": "lint", "arguments": {"path": 3}}\n</tool_call>', "validation_error", "must be a string"),
    ('<tool_call>\n{"name": "edit_file", "arguments": {"path": "a.py", "old": "", "new": "y"}}\n</tool_call>',
     "validation_error", "old is empty"),
    ('<tool_call>\n{"name": "lint", "arguments": {"path": "a"}, "id": 1}\n</tool_call>', "validation_error",
     "unexpected key(s) id"),
])
def test_broken_calls_are_recorded_with_the_reason(text, status, why):
    r = parse_response(text)
    assert r.calls == [] and r.broken == 1 and r.records[0].status.value == status
    assert why in r.records[0].error


def test_a_broken_call_keeps_the_tool_name_it_could_read():
    r = parse_response('<tool_call>\n{"name": "edit_file", "arguments": {"path": \n</tool_call>')
    assert r.records[0].name == "edit_file" and r.kind is ResponseKind.answer


def test_text_around_tool_calls_and_stray_closing_tags_are_broken():
    r = parse_response("Sure! " + EDIT.text())
    assert r.calls == [EDIT] and r.broken == 1 and "text outside" in r.records[-1].error
    assert parse_response("oops </tool_call>").broken == 1


def test_openai_round_trip_of_tool_calls_and_the_tools_parameter():
    wire = to_openai_tool_calls([EDIT], "req1")
    assert wire[0]["id"] == "call_req1_0" and json.loads(wire[0]["function"]["arguments"]) == EDIT.arguments
    assert from_openai_tool_calls(wire) == [EDIT]
    with pytest.raises(ValueError, match="unknown tool"):
        from_openai_tool_calls([{"function": {"name": "nope", "arguments": "{}"}}])
    tools = openai_tools()
    assert {t["function"]["name"] for t in tools} == set(TOOLS)
    edit = next(t for t in tools if t["function"]["name"] == "edit_file")
    assert edit["function"]["parameters"]["required"] == ["path", "old", "new"]
