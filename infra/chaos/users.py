"""The simulated users of a chaos run, in the runner's process (they are the clients, not a fault target): the
real population driving serving through the official OpenAI client, telemetry through the SDK to the ingest
collector (so collector and broker faults are felt by a real client: it spools and replays). A recording policy
keeps the client's side of every call -- answered (with serving's request_id) or failed -- for the audit. They
reach serving as `rtrl simulate` does (`infra.commands.simulate.serving_policy`): $RTRL_SERVING_KEY, else a key of
client rtrl-simulator where serving requires one, and serving's own certificate when it speaks TLS.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

from infra.chaos.audit import ClientRecord
from codetasks.policy import OpenAIPolicy, PolicyError, PolicyReply, PolicyRequest
from infra.commands.simulate import serving_policy
from schemas.events import ResponseKind

USERS_LINGER_MS = 5000   # the users' SDK sends a batch every 5 s: fewer, larger objects in the broker's store


class RecordingPolicy:
    """`OpenAIPolicy` that records each call as its client saw it."""

    def __init__(self, inner: OpenAIPolicy):
        self.inner = inner
        self.records: list[ClientRecord] = []
        self._lock = threading.Lock()

    def respond(self, request: PolicyRequest) -> PolicyReply:
        m = request.metadata
        at = datetime.fromisoformat(str(m["event_time"]).replace("Z", "+00:00"))
        try:
            reply = self.inner.respond(request)
        except PolicyError:
            with self._lock:
                self.records.append(ClientRecord("", False, at, bool(m.get("privacy_mode"))))
            raise
        with self._lock:
            self.records.append(ClientRecord(reply.request_id, True, at, bool(m.get("privacy_mode")),
                                             reply.kind == ResponseKind.question))
        return reply

    def snapshot(self) -> list[ClientRecord]:
        with self._lock:
            return list(self.records)


class Users:
    """Start the population in a background thread; `stop()` ends it and flushes the SDK (spool included)."""

    def __init__(self, cfg, api_key: str, log=print):
        """`api_key`: the collector's key of the users' SDK (serving's comes from `serving_policy`)."""
        from instrumentation.collector_client import CollectorTransport
        from instrumentation.sdk import TelemetryClient
        from instrumentation.simulator.clock import ScaledClock, parse_instant
        from instrumentation.simulator.population import Population

        sim = cfg.simulator
        inner, url, key_from = serving_policy(cfg, timeout_s=sim.request_timeout_s)
        self.policy = RecordingPolicy(inner)
        self.model = self.policy.inner.check()
        if key_from != "none":
            log(f"[users] serving at {url}, API key from {key_from}")
        transport = CollectorTransport(f"http://{cfg.collector.host}:{cfg.collector.port}", api_key,
                                       timeout_s=cfg.sdk.send_timeout_s)
        sdk = cfg.sdk.model_copy(update={"linger_ms": USERS_LINGER_MS})
        self.sdk = TelemetryClient(transport, sdk, Path(cfg.state_path) / "spool" / "users", name="users")
        start = parse_instant(sim.start_time) if sim.start_time else datetime.now(timezone.utc)
        self.population = Population(sim, self.policy, self.sdk, ScaledClock(start, sim.speed), keep_ledger=False)
        self.thread = threading.Thread(target=self._run, name="chaos-users", daemon=True)
        self.log = log

    def _run(self) -> None:
        self.population.run(self.population.clock.start + timedelta(days=365), drain=False)

    def start(self) -> None:
        self.thread.start()

    def requests(self) -> int:
        return len(self.policy.records)

    def stop(self, flush_timeout_s: float = 120.0) -> dict:
        self.population.stop.set()
        self.thread.join(timeout=float(self.policy.inner.client.timeout or 120) + 10)
        self.sdk.close(timeout=flush_timeout_s)
        return self.sdk.stats()
