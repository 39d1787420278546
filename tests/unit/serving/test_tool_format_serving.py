"""Serving in the checkpoint's tool-call format (`serving.tool_format`): responses are parsed in it, the calls a
conversation sends back are written in it, and streaming holds text back at its markers."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient

from schemas.tool_formats import FORMATS, get_format
from schemas.tool_protocol import ToolCall
from serving.app import create_app
from serving.protocol import parse_request, tool_format_of
from serving.streaming import ContentStream
from tests.unit.serving.test_gateway import gateway
from tests.unit.serving.test_streaming import events_of, streamed

EDIT = ToolCall("edit_file", {"path": "a.py", "old": "X = 1", "new": "X = 2"})
READ = ToolCall("read_file", {"path": "a.py"})
SENT_BACK = [{"role": "user", "content": "fix a.py"},
             {"role": "assistant", "content": "",
              "tool_calls": [{"id": "c0", "type": "function",
                              "function": {"name": "read_file", "arguments": json.dumps(READ.arguments)}}]},
             {"role": "tool", "tool_call_id": "c0", "content": "X = 1"}]
MISTRAL_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}[TOOL_CALLS]"


def request(messages=SENT_BACK):
    return parse_request({"user": "u", "messages": [dict(m) for m in messages]}, default_max_tokens=64,
                         max_model_len=1024)


def test_auto_takes_the_templates_format_and_an_explicit_setting_wins():
    assert tool_format_of("auto", MISTRAL_TEMPLATE) == "mistral"
    assert tool_format_of("auto", None) == tool_format_of("auto", "{{ messages }}") == "hermes"
    assert tool_format_of("llama3_json", MISTRAL_TEMPLATE) == "llama3_json"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_calls_sent_back_are_written_in_the_format_and_responses_parsed_in_it(name):
    req = request()
    assert req.messages[1]["content"] == READ.text()          # Hermes until a checkpoint says otherwise
    req.use_tool_format(name)
    fmt = get_format(name)
    assert req.messages[1]["content"] == fmt.render([READ])
    assert fmt.parse(req.messages[1]["content"]).calls == [READ]
    assert req.parse(fmt.render([EDIT])).calls == [EDIT]
    assert req.messages[0] == {"role": "user", "content": "fix a.py"} and req.messages[2]["content"] == "X = 1"


def test_a_response_in_another_format_is_not_a_call():
    req = request()
    req.use_tool_format("mistral")
    parsed = req.parse(EDIT.text())                          # Hermes text from a Mistral checkpoint
    assert parsed.calls == [] and parsed.kind.value == "answer"


def test_text_beside_sent_back_calls_is_kept_before_them():
    messages = [dict(SENT_BACK[0]), {**SENT_BACK[1], "content": "Reading it."}]
    req = request(messages)
    req.use_tool_format("mistral")
    assert req.messages[1]["content"] == "Reading it.\n" + get_format("mistral").render([READ])


def test_streaming_holds_back_at_the_formats_markers():
    c = ContentStream(markers=FORMATS["mistral"].markers)
    assert c.update("Let me look [TOOL") == "Let me look"
    assert c.update('Let me look [TOOL_CALLS][{"name"') == "" and c.closed
    hermes_text = ContentStream(markers=FORMATS["mistral"].markers)
    assert hermes_text.update("see <tool_call> there") == "see <tool_call> there"   # not a Mistral marker
    llama = ContentStream(markers=FORMATS["llama3_json"].markers)
    assert llama.update("x = 1 <|python") == "x = 1" and llama.update('{"name": "lint"') == "" and llama.closed


def _recording(engine, template: str | None):
    """The engine with a tokenizer whose chat template is `template`, remembering the messages it renders."""
    engine.tokenizer = SimpleNamespace(chat_template=template)
    engine.rendered = []
    prompt_ids = engine.prompt_ids

    def record(messages, tools=None):
        engine.rendered.append([dict(m) for m in messages])
        return prompt_ids(messages, tools)
    engine.prompt_ids = record


@pytest.mark.parametrize("setting, template", [("mistral", None), ("auto", MISTRAL_TEMPLATE)])
def test_the_gateway_parses_and_renders_in_the_checkpoints_format(setting, template):
    gw, events, loader = gateway(reply=get_format("mistral").render([EDIT]), tool_format=setting)
    with TestClient(create_app(gw, poll=False)) as client:
        for e in loader.engines:
            _recording(e, template)
        body = client.post("/v1/chat/completions", json={"user": "u", "messages": SENT_BACK}).json()
        stream = events_of(client.post("/v1/chat/completions",
                                       json={"user": "u", "messages": SENT_BACK, "stream": True}))
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == EDIT.arguments
    assert events[0].response_kind.value == "edit" and events[0].tool_calls[0].status.value == "ok"
    rendered = next(e for e in loader.engines if e.rendered).rendered[0]
    assert rendered[1]["content"] == get_format("mistral").render([READ])
    content, last = streamed(stream)
    assert content == "" and last["finish_reason"] == "tool_calls" and last["delta"]["tool_calls"]


def test_the_default_setting_keeps_hermes_for_a_template_without_tool_markers():
    gw, events, loader = gateway(reply=EDIT.text())
    assert gw.cfg.tool_format == "auto"
    with TestClient(create_app(gw, poll=False)) as client:
        body = client.post("/v1/chat/completions", json={"user": "u", "messages": SENT_BACK}).json()
    assert body["choices"][0]["finish_reason"] == "tool_calls"
