"""Drive an ASGI app below any HTTP client: exactly the headers and body chunks a hostile client would send.

    reply = raw_post(app, "/v1/events", [(b"content-type", b"application/json")], [b'{"events": [', b"]}"])
    reply.status, reply.json(), reply.headers["retry-after"], reply.chunks_pulled

Used by the fuzzers (`rtrl bench fuzz`) and the input-bound tests of the collector and the serving gateway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class RawReply:
    status: int
    body: bytes
    headers: dict[str, str]        # lower-case names
    chunks_pulled: int             # how many body chunks the app read before answering

    def json(self):
        return json.loads(self.body)


def post_scope(path: str, headers: list[tuple[bytes, bytes]], server_port: int = 80) -> dict:
    """An ASGI HTTP scope for `POST path` with raw headers."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
            "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", server_port)}


def raw_post(app, path: str, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> RawReply:
    """POST `chunks` (each one ASGI body message) to `app`; the reply and how much of the body was pulled."""
    import anyio

    pulled = 0

    async def receive():
        nonlocal pulled
        if pulled < len(chunks):
            pulled += 1
            return {"type": "http.request", "body": chunks[pulled - 1], "more_body": pulled < len(chunks)}
        return {"type": "http.disconnect"}

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    anyio.run(app, post_scope(path, headers), receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return RawReply(start["status"], body, {k.decode().lower(): v.decode() for k, v in start["headers"]}, pulled)
