"""Each tool-call format round-trips through its family's chat template and its parser: tokenizers built here with
templates modeled on Qwen2.5 (Hermes), Llama 3.1 (JSON) and Mistral v0.3 ([TOOL_CALLS]) (tests/unit/schemas/
chat_templates.py) render a conversation whose assistant turn holds calls written by the format; the assistant
turn's tokens, decoded as serving decodes a sample, parse back to the same calls, and `detect` names the format
from the template."""

from __future__ import annotations

import json

import pytest

from schemas.tool_formats import detect, get_format
from schemas.tool_protocol import ToolCall, openai_tools
from tests.unit.schemas.chat_templates import FAMILIES, family_tokenizer

CALLS = [ToolCall("edit_file", {"path": "app/util.py", "old": "RETRIES = 3", "new": "RETRIES = 5  # \"x\"; {y}"}),
         ToolCall("read_file", {"path": "README.md"})]
USER = {"role": "user", "content": "Raise the retry count in app/util.py."}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    """(family, its tokenizer saved as a checkpoint's and loaded back, its format, its end-of-turn token)."""
    name = request.param
    tok = family_tokenizer(name, tmp_path_factory.mktemp(name))
    return name, tok, get_format(FAMILIES[name][3]), FAMILIES[name][2]


def assistant_turn(tok, eot: str, messages: list[dict]) -> str:
    """The last (assistant) message of `messages` as the model writes it: the template's text after the
    generation prompt, tokenized, up to the end-of-turn token, decoded with special tokens kept (as serving's
    engine decodes a sample)."""
    tools = openai_tools()
    prompt = tok.apply_chat_template(messages[:-1], tools=tools, add_generation_prompt=True, tokenize=False)
    full = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    assert full.startswith(prompt)
    ids = tok(full[len(prompt):], add_special_tokens=False)["input_ids"]
    eos = tok.convert_tokens_to_ids(eot)
    assert eos in ids, "the assistant turn ends with the end-of-turn token"
    return tok.decode(ids[:ids.index(eos)], skip_special_tokens=False)


def test_detect_names_each_familys_format_from_its_template(family):
    name, tok, fmt, _ = family
    assert detect(tok.chat_template) == fmt.name, name


def test_calls_written_by_the_format_round_trip_through_the_template(family):
    name, tok, fmt, eot = family
    for calls in (CALLS[:1], CALLS):
        text = assistant_turn(tok, eot, [USER, {"role": "assistant", "content": fmt.render(calls)}])
        parsed = fmt.parse(text)
        assert parsed.calls == calls and parsed.broken == 0, (name, text)


def test_the_templates_own_tool_call_rendering_parses_to_the_same_call(family):
    """A conversation's OpenAI `tool_calls` as the family's template writes them (what its models were trained
    to write) parse with the family's format."""
    name, tok, fmt, eot = family
    call = CALLS[0]
    message = {"role": "assistant", "content": "" if name == "qwen2.5" else None,
               "tool_calls": [{"id": "abcDEF123", "type": "function",
                               "function": {"name": call.name, "arguments": call.arguments}}]}
    text = assistant_turn(tok, eot, [USER, message])
    assert fmt.parse(text).calls == [call], (name, text)


def test_the_format_marker_is_one_special_token_kept_by_decoding(family):
    name, tok, fmt, _ = family
    marker = {"hermes": "<tool_call>", "llama3_json": "<|python_tag|>", "mistral": "[TOOL_CALLS]"}[fmt.name]
    ids = tok(marker + json.dumps({"a": 1}), add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids[0]) == marker and tok.decode(ids).startswith(marker)


def test_a_response_in_another_familys_format_is_no_call(family):
    name, tok, fmt, eot = family
    other = get_format("mistral" if fmt.name != "mistral" else "hermes")
    text = assistant_turn(tok, eot, [USER, {"role": "assistant", "content": other.render(CALLS[:1])}])
    assert fmt.parse(text).calls == [], name
