"""The chat format: the Jinja template and the Python renderer agree; OpenAI tool calls become protocol text."""

import jinja2
import pytest

from schemas.chat_format import CHAT_TEMPLATE, END, render, to_text_messages
from schemas.tool_protocol import ToolCall, parse_response, to_openai_tool_calls

CALL = ToolCall("edit_file", {"path": "a.py", "old": "X = 1", "new": "X = 2"})


def _jinja(messages, add_generation_prompt=True):
    return jinja2.Environment().from_string(CHAT_TEMPLATE).render(messages=messages,
                                                                  add_generation_prompt=add_generation_prompt)


def test_template_and_renderer_agree_on_a_conversation_with_tool_calls():
    msgs = to_text_messages([
        {"role": "system", "content": "You edit code."},
        {"role": "user", "content": "Set X to 2 in a.py"},
        {"role": "assistant", "content": None, "tool_calls": to_openai_tool_calls([CALL], "r1")},
        {"role": "tool", "content": "ok"},
    ])
    assert msgs[2]["content"] == CALL.text() and parse_response(msgs[2]["content"]).calls == [CALL]
    for gen in (True, False):
        assert render(msgs, gen) == _jinja(msgs, gen)
    assert render(msgs).endswith("<|tool|>\nok\n<|assistant|>\n") and f"{CALL.text()}{END}" in render(msgs)


def test_unknown_roles_are_rejected_and_text_parts_are_kept():
    with pytest.raises(ValueError, match="unknown chat role"):
        to_text_messages([{"role": "developer", "content": "x"}])
    assert to_text_messages([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])[0]["content"] == "hi"
