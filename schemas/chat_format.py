"""The default policy's chat format: how a conversation becomes the text the model reads.

    <|system|>
    {system}
    <|user|>
    {user}
    <|assistant|>
    {assistant text, tool calls in the tool-call protocol's text form}<|end|>
    <|tool|>
    {tool result}
    <|assistant|>
                                    <- generation starts here; the model ends its turn with <|end|>

The default tokenizer ships the same format as its Jinja `chat_template` (a test checks they agree), so serving
can use `tokenizer.apply_chat_template` for any Hugging Face checkpoint, the default one included. OpenAI-style
assistant messages with `tool_calls` are first turned into protocol text (`to_text_messages`).
"""

from __future__ import annotations

import json
from typing import Any

from schemas.tool_protocol import ToolCall

ROLES = ("system", "user", "assistant", "tool")
END = "<|end|>"
SPECIAL_TOKENS = tuple(f"<|{r}|>" for r in ROLES) + (END,)

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|assistant|>\n{{ m['content'] }}<|end|>\n"
    "{% else %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def _get(obj: Any, key: str, default=None):
    return obj.get(key, default) if isinstance(obj, dict) else getattr(obj, key, default)


def to_text_messages(messages: list[Any]) -> list[dict[str, str]]:
    """OpenAI chat messages (dicts or client objects) -> [{"role", "content"}] with tool calls as protocol text."""
    out = []
    for m in messages:
        role = _get(m, "role")
        if role not in ROLES:
            raise ValueError(f"unknown chat role {role!r}; known: {', '.join(ROLES)}")
        content = _get(m, "content") or ""
        if not isinstance(content, str):  # OpenAI content parts: keep the text ones
            content = "".join(_get(p, "text", "") for p in content if _get(p, "type") == "text")
        calls = _get(m, "tool_calls") or []
        if role == "assistant" and calls:
            texts = []
            for tc in calls:
                fn = _get(tc, "function")
                args = _get(fn, "arguments")
                texts.append(ToolCall(_get(fn, "name"), json.loads(args) if isinstance(args, str) else args).text())
            content = "\n".join(([content] if content else []) + texts)
        out.append({"role": role, "content": content})
    return out


def render(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The same text as the Jinja CHAT_TEMPLATE (for tests and for building training examples)."""
    parts = []
    for m in messages:
        if m["role"] == "assistant":
            parts.append(f"<|assistant|>\n{m['content']}{END}\n")
        else:
            parts.append(f"<|{m['role']}|>\n{m['content']}\n")
    if add_generation_prompt:
        parts.append("<|assistant|>\n")
    return "".join(parts)
