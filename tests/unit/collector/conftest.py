"""Fixtures for the collector's unit tests: the ASGI app with a recording fake transport and controllable clocks."""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from instrumentation.collector.app import create_app
from instrumentation.collector.auth import signature
from instrumentation.collector.config import CollectorConfig
from schemas.api_keys import KeyStore, signing_key
from instrumentation.transport import Record, TransportError

FIXTURES = Path(__file__).parents[3] / "schemas" / "fixtures"
T0 = 1_793_527_230.0  # a fixed wall-clock second: 30 s after the schema fixtures' event_time (2026-11-01T10:00:00Z)
ORG = "org-a"  # the fixtures' org_id


def fixture_event(kind: str, version: int = 1, **changes) -> dict:
    """A valid event of type `kind` (from the schema fixtures) with a fresh event_id, then `changes`."""
    d = json.loads((FIXTURES / kind / f"v{version}.json").read_text())
    d["event_id"] = str(uuid.uuid4())
    d.update(changes)
    return d


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def valid_events(n: int, at: float | None = None) -> list[dict]:
    """`n` valid events of every type in turn (org ORG); `at`: their event_time (unix s) instead of the fixtures'."""
    types = ["edit_applied", "suggestion_shown", "followup_message", "tool_call_result", "codebase_snapshot",
             "edit_rejected", "trajectory"]
    when = {} if at is None else {"event_time": iso(at)}
    return [fixture_event(types[i % len(types)], 2 if types[i % len(types)] == "trajectory" else 1, **when)
            for i in range(n)]


class FakeTransport:
    """Records every batch it is given; `fail` makes `send` raise TransportError (Kafka down)."""

    def __init__(self):
        self.batches: list[list[Record]] = []
        self.fail = False
        self.closed = False

    def send(self, records):
        if self.fail:
            raise TransportError("broker unreachable (fake)")
        self.batches.append(list(records))

    @property
    def records(self) -> list[Record]:
        return [r for b in self.batches for r in b]

    @property
    def event_ids(self) -> list[str]:
        return [json.loads(r.value)["event_id"] for r in self.records]

    def close(self):
        self.closed = True


@dataclass
class Clock:
    wall: float = T0
    mono: float = 1000.0

    def advance(self, s: float) -> None:
        self.wall += s
        self.mono += s


@dataclass
class Harness:
    client: TestClient
    transport: FakeTransport
    clock: Clock
    keys: KeyStore
    cfg: CollectorConfig
    kafka: dict = field(default_factory=lambda: {"ok": True})
    api_key: str = ""
    client_id: str = "web"

    def bearer(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.api_key}"}

    def signed(self, body: bytes, *, client: str | None = None, key: str | None = None, ts: float | None = None,
               nonce: str | None = None) -> dict[str, str]:
        ts_s = str(int(self.clock.wall if ts is None else ts))
        nonce = nonce or uuid.uuid4().hex
        return {"X-Rtrl-Client": client or self.client_id, "X-Rtrl-Timestamp": ts_s, "X-Rtrl-Nonce": nonce,
                "X-Rtrl-Signature": signature(signing_key(key or self.api_key), ts_s, nonce, body)}

    def post(self, body: dict | bytes, headers: dict | None = None, *, auth: str = "bearer", **kw):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        if auth == "bearer":
            h.update(self.bearer())
        elif auth == "signed":
            h.update(self.signed(raw))
        h.update(headers or {})
        return self.client.post("/v1/events", content=raw, headers=h, **kw)


@pytest.fixture
def make_harness(tmp_path):
    made = []

    def make(**cfg_fields) -> Harness:
        cfg = CollectorConfig(**cfg_fields)
        keys = KeyStore(tmp_path / f"keys{len(made)}.json")
        api_key = keys.create("web", org=ORG, role="serving")  # serving: may write every event type
        clock = Clock()
        transport = FakeTransport()
        kafka = {"ok": True}
        app = create_app(cfg, keys=keys, transport=transport, kafka_ok=lambda: kafka["ok"],
                         clock=lambda: clock.wall, monotonic=lambda: clock.mono)
        client = TestClient(app, raise_server_exceptions=True)
        client.__enter__()
        h = Harness(client, transport, clock, keys, cfg, kafka, api_key)
        made.append(h)
        return h

    yield make
    for h in made:
        h.client.__exit__(None, None, None)


@pytest.fixture
def harness(make_harness) -> Harness:
    return make_harness()


def deep(d: dict) -> dict:
    return copy.deepcopy(d)
