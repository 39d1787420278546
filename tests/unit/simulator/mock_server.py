"""Serving's response shape without serving (`completion`), and a small OpenAI-compatible HTTP endpoint for CLI
tests (no vLLM) that answers from rules.

"Set NAME to VALUE." gets the right edit_file call, an ambiguous "Change the ..." a question, anything else an
edit whose old text is not in the file (the client reports a tool error). Request ids count up."""

from __future__ import annotations

import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from schemas.tool_protocol import ToolCall, parse_response, to_openai_tool_calls


def completion(text: str, request_id: str = "req-1", extras: bool = True) -> dict:
    """What serving answers for a model response `text` (the protocol parsed the way serving does)."""
    parsed = parse_response(text)
    message = {"role": "assistant", "content": None if parsed.calls and not parsed.broken else text}
    if parsed.calls and not parsed.broken:
        message["tool_calls"] = to_openai_tool_calls(parsed.calls, request_id)
    body = {"id": f"chatcmpl-{request_id}", "object": "chat.completion", "created": 0, "model": "policy",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}}
    if extras:
        body.update(request_id=request_id, policy_version="7", arm="treatment", response_kind=parsed.kind.value,
                    tool_call_records=[r.model_dump(mode="json") for r in parsed.records])
    return body


SET = re.compile(r"^Set ([A-Z_]+) to (\d+)\.$")


def answer(messages: list[dict]) -> str:
    first = messages[1]["content"]
    path, rest = first.split("\n", 1)
    text, request = rest[4:].rsplit("```\n", 1)
    if len(messages) == 2 and (m := SET.match(request.strip())):
        name, value = m.groups()
        line = next(x for x in text.splitlines() if x.startswith(f"{name} = "))
        return ToolCall("edit_file", {"path": path, "old": line, "new": f"{name} = {value}"}).text()
    if len(messages) == 2 and request.startswith("Change the "):
        return "Which one do you mean?"
    return ToolCall("edit_file", {"path": path, "old": "NOT THERE", "new": "x"}).text()


class MockServing:
    def __init__(self):
        self.ids: list[str] = []
        self.bodies: list[dict] = []
        counter, lock, outer = itertools.count(), threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send({"object": "list", "data": [{"id": "rtrl-policy", "object": "model", "created": 0,
                                                        "owned_by": "rtrl"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    rid = f"mock-{next(counter)}"
                    outer.ids.append(rid)
                    outer.bodies.append(body)
                self._send(completion(answer(body["messages"]), request_id=rid))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "MockServing":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
