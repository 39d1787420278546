"""Tool-call formats (schemas/tool_formats.py): each family's calls round-trip through render and parse, broken
calls are records with a reason, and a chat template names its format."""

from __future__ import annotations

import pytest

from schemas.events import ResponseKind, ToolCallStatus
from schemas.tool_formats import FORMATS, detect, get_format
from schemas.tool_protocol import ToolCall

CALLS = [ToolCall("edit_file", {"path": "app/util.py", "old": "RETRIES = 3", "new": "RETRIES = 5; # \"x\" {y}"}),
         ToolCall("read_file", {"path": "README.md"})]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_calls_round_trip_through_render_and_parse(name):
    fmt = get_format(name)
    for calls in (CALLS[:1], CALLS):
        parsed = fmt.parse(fmt.render(calls))
        assert parsed.calls == calls and parsed.broken == 0 and parsed.kind is ResponseKind.edit
        assert [r.name for r in parsed.records] == [c.name for c in calls]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_plain_answers_and_questions_are_not_calls(name):
    fmt = get_format(name)
    assert fmt.parse("Use a retry loop.").kind is ResponseKind.answer
    q = fmt.parse("Which file holds the retry count?")
    assert q.kind is ResponseKind.question and q.records == [] and q.content.endswith("?")


@pytest.mark.parametrize("name, text, status", [
    ("llama3_json", '{"name": "read_file", "parameters": {"path": 3}}', ToolCallStatus.validation_error),
    ("llama3_json", '<|python_tag|>{"name": "read_file", "parameters": ', ToolCallStatus.parse_error),
    ("llama3_json", '{"name": "read_file", "arguments": {"path": "a"}}', ToolCallStatus.parse_error),
    ("mistral", '[TOOL_CALLS][{"name": "nope", "arguments": {}}]', ToolCallStatus.validation_error),
    ("mistral", "[TOOL_CALLS]{not json", ToolCallStatus.parse_error),
    ("mistral", '[TOOL_CALLS]{"name": "read_file", "arguments": {"path": "a"}}', ToolCallStatus.parse_error),
])
def test_a_broken_call_is_a_record_with_its_reason(name, text, status):
    parsed = get_format(name).parse(text)
    assert parsed.calls == [] and parsed.records[0].status is status and parsed.records[0].error


def test_text_beside_calls_is_a_broken_call_in_every_format():
    for name, fmt in FORMATS.items():
        rendered = fmt.render(CALLS[:1])
        text = "Sure, here it is: " + rendered if name != "llama3_json" else rendered + "; and then I stop"
        parsed = fmt.parse(text)
        assert parsed.broken >= 1, name


def test_llama3_calls_split_at_top_level_semicolons_only():
    text = ('{"name": "search", "parameters": {"query": "a; b"}}; '
            '{"name": "lint", "parameters": {"path": "x.py"}}')
    parsed = get_format("llama3_json").parse(text)
    assert [c.arguments for c in parsed.calls] == [{"query": "a; b"}, {"path": "x.py"}]


def test_a_chat_template_names_its_format():
    assert detect("{% for m in messages %}<tool_call>{{ m }}</tool_call>{% endfor %}") == "hermes"
    assert detect("{{ bos_token }}[AVAILABLE_TOOLS]...[TOOL_CALLS]{{ calls | tojson }}") == "mistral"
    llama = ('{{- "<|start_header_id|>ipython<|end_header_id|>" }}{"name": {{ name }}, "parameters": '
             '{{ args | tojson }}}<|eot_id|>')
    assert detect(llama) == "llama3_json"
    assert detect(None) == detect("{{ messages }}") == "hermes"
    with pytest.raises(ValueError, match="unknown tool-call format"):
        get_format("xml")
