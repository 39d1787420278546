"""The collector against the real broker: exactly the valid events reach their Kafka topics, stamped with
received_time; rejected, unauthenticated, oversized and replayed input never does, nor events of another org, a
client key's trajectories or an event dated 2099. Also the CLI's --detach and a clean stop on Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from infra.argv import rtrl_argv
from infra.config import RtrlConfig
from instrumentation.collector.app import KAFKA_RETRY_AFTER_S
from instrumentation.collector.auth import signature
from schemas.api_keys import KeyStore, signing_key
from instrumentation.collector.server import make_server, url_of
from instrumentation.collector_client import CollectorRejected, CollectorTransport, CollectorUnavailable
from instrumentation.transport import Record, TransportError
from schemas import TOPICS, parse_event, topic_for
from tests.conftest import free_port, make_config
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
FIXTURES = REPO / "schemas" / "fixtures"
ORG = "org-a"  # the fixtures' org_id
TYPES = ["edit_applied", "suggestion_shown", "edit_rejected", "codebase_snapshot", "followup_message",
         "tool_call_result", "trajectory"]


def event(kind: str, **changes) -> dict:
    version = 2 if kind == "trajectory" else 1
    d = json.loads((FIXTURES / kind / f"v{version}.json").read_text())
    d.update({"event_id": str(uuid.uuid4()), "event_time": datetime.now(timezone.utc).isoformat(), **changes})
    return d


def valid(n: int) -> list[dict]:
    return [event(TYPES[i % len(TYPES)], user_id=f"u-{i % 5}") for i in range(n)]


def invalid(n: int) -> list[dict]:
    """Events with a real-looking event_id but one bad field each (so we can look for their ids in Kafka)."""
    breakers = [dict(user_id=""), dict(event_time="yesterday"), dict(event_type="edit_applied", hunks="x"),
                dict(schema_version=0), dict(privacy_mode=True, event_type="followup_message", text="secret")]
    out = []
    for i in range(n):
        e = event("followup_message" if i % 5 == 4 else "edit_applied")
        e.update(breakers[i % len(breakers)])
        out.append(e)
    return out


def records(events: list[dict]) -> list[Record]:
    """Records carrying the raw JSON (not re-validated here), like a client whose SDK let a bad event through."""
    return [Record(topic_for("edit_applied"), b"u", json.dumps(e).encode()) for e in events]


def consume(bootstrap: str, want: set[str], deadline_s: float = 45.0) -> dict[str, list[tuple[str, dict]]]:
    """Every event on the event topics, by event_id, read from the beginning with manual assignment. Polls until
    all of `want` was seen (end offsets are not trusted: Tansu reports a wrong high watermark), then a little
    longer so that anything else produced alongside would show up too. AssertionError after `deadline_s`."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             client_id="rtrl-collector-test")
    try:
        tps = []
        for topic in TOPICS:
            parts = wait_for(lambda: consumer.partitions_for_topic(topic), 15, f"the partitions of {topic}",
                             interval_s=0.2)
            tps += [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        seen: dict[str, list[tuple[str, dict]]] = {}
        extra_polls = 4

        def poll() -> bool:
            nonlocal extra_polls
            for batch in consumer.poll(timeout_ms=500).values():
                for rec in batch:
                    try:
                        v = json.loads(rec.value)
                    except ValueError:
                        continue
                    if isinstance(v, dict) and "event_id" in v:
                        seen.setdefault(v["event_id"], []).append((rec.topic, v))
            if want <= set(seen):
                extra_polls -= 1
            return extra_polls == 0

        wait_for(poll, deadline_s, lambda: f"all {len(want)} events in Kafka ({len(want - set(seen))} missing)",
                 interval_s=0)
        return seen
    finally:
        consumer.close()


@contextmanager
def serving(cfg: RtrlConfig, bootstrap: str):
    keys_path = cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json")
    server = make_server(cfg.collector, bootstrap, keys_path, log_level="warning")
    thread = threading.Thread(target=server.run, name="collector", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 30, "the collector starting", interval_s=0.05)
    assert server.started, "collector did not start"
    try:
        yield url_of(cfg.collector)
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture
def collector(stack, tmp_path):
    cfg = make_config(tmp_path / "state")
    keys = KeyStore(cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json"))
    key = keys.create("web", org=ORG, role="serving")
    with serving(cfg, stack.cfg.kafka.bootstrap()) as url:
        yield url, key, keys


def _post(url: str, body: bytes, headers: dict, timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{url}/v1/events", content=body, headers={"Content-Type": "application/json", **headers},
                      timeout=timeout)


def test_exactly_the_valid_events_reach_kafka_with_received_time(stack, collector):
    url, key, keys = collector
    expected: dict[str, dict] = {}
    never: set[str] = set()
    t_start = time.time()

    # 1. the SDK's path: CollectorTransport, bearer and signed, batches mixing valid and invalid events
    for sign in (False, True):
        t = CollectorTransport(url, key, client_id="web", sign=sign, timeout_s=30)
        good, bad = valid(40), invalid(10)
        t.send(records(good[:20] + bad + good[20:]))
        assert t.rejected_total == len(bad)
        expected.update((e["event_id"], e) for e in good)
        never.update(e["event_id"] for e in bad)
        t.close()

    # 2. raw HTTP: mixed batch, unauthenticated, wrong key, oversized, replayed
    good, bad = valid(30), invalid(5)
    r = _post(url, json.dumps({"events": bad + good}).encode(), {"Authorization": f"Bearer {key}"})
    assert r.status_code == 200 and r.json()["accepted"] == 30
    assert sorted(x["index"] for x in r.json()["rejected"]) == list(range(5))
    expected.update((e["event_id"], e) for e in good)
    never.update(e["event_id"] for e in bad)

    for headers in ({}, {"Authorization": "Bearer rtrl_wrong"}):
        refused = valid(5)
        assert _post(url, json.dumps({"events": refused}).encode(), headers).status_code == 401
        never.update(e["event_id"] for e in refused)

    huge = valid(3000)  # > 1 MiB and > 1000 events
    assert _post(url, json.dumps({"events": huge}).encode(), {"Authorization": f"Bearer {key}"}).status_code == 413
    never.update(e["event_id"] for e in huge)

    replayed = valid(4)
    body = json.dumps({"events": replayed}).encode()
    ts, nonce = str(int(time.time())), uuid.uuid4().hex
    signed = {"X-Rtrl-Client": "web", "X-Rtrl-Timestamp": ts, "X-Rtrl-Nonce": nonce,
              "X-Rtrl-Signature": signature(signing_key(key), ts, nonce, body)}
    assert _post(url, body, signed).status_code == 200
    assert _post(url, body, signed).status_code == 409
    expected.update((e["event_id"], e) for e in replayed)

    # 3. what the key and the server clock do not allow: another org, a client key's trajectory, the year 2099
    editor = keys.create("editor", org=ORG, role="client")
    # the running collector re-reads the keys file at most once a second: wait until it takes the new key (an empty
    # batch produces nothing; 401 until then)
    wait_for(lambda: _post(url, b'{"events": []}', {"Authorization": f"Bearer {editor}"}).status_code == 200, 30,
             "the running collector accepting a key added to its keys file", interval_s=0.2)
    allowed = event("edit_applied")
    refused = [event("edit_applied", org_id="org-b"), event("trajectory"),
               event("edit_applied", event_time="2099-12-31T00:00:00Z")]
    r = _post(url, json.dumps({"events": refused + [allowed]}).encode(), {"Authorization": f"Bearer {editor}"})
    assert r.status_code == 200 and r.json()["accepted"] == 1
    assert [x["field"] for x in r.json()["rejected"]] == ["org_id", "event_type", "event_time"]
    expected[allowed["event_id"]] = allowed
    never.update(e["event_id"] for e in refused)

    seen = consume(stack.cfg.kafka.bootstrap(), set(expected))
    t_end = time.time()
    missing = set(expected) - set(seen)
    assert not missing, f"{len(missing)} valid events never reached Kafka"
    assert not never & set(seen), "a rejected or unauthenticated event reached Kafka"
    for eid, sent in expected.items():
        [(topic, got)] = seen[eid]  # exactly once (the replay was not produced again)
        assert topic == topic_for(sent["event_type"])
        event_obj = parse_event(got)
        assert event_obj.received_time is not None
        assert t_start <= event_obj.received_time.timestamp() <= t_end  # stamped by the collector on this host
        assert got["user_id"] == sent["user_id"]


def test_healthz_says_kafka_is_reachable(collector):
    url, _, _ = collector
    r = httpx.get(f"{url}/healthz", timeout=30)
    assert (r.status_code, r.json()) == (200, {"status": "ok", "kafka": True})


def test_unreachable_kafka_is_503_and_the_client_keeps_the_batch(tmp_path):
    cfg = make_config(tmp_path / "state", "collector.produce_timeout_s=2")
    key = KeyStore(cfg.path_or_default("", "collector_keys.json")).create("web", org=ORG, role="serving")
    with serving(cfg, f"127.0.0.1:{free_port()}") as url:
        r = _post(url, json.dumps({"events": valid(3)}).encode(), {"Authorization": f"Bearer {key}"}, timeout=90)
        assert r.status_code == 503 and int(r.headers["Retry-After"]) == KAFKA_RETRY_AFTER_S
        with pytest.raises(TransportError) as err:
            CollectorTransport(url, key, timeout_s=90).send(records(valid(2)))
        assert isinstance(err.value, CollectorUnavailable) and not isinstance(err.value, CollectorRejected)
        health = httpx.get(f"{url}/healthz", timeout=30)
        assert health.status_code == 503 and health.json()["kafka"] is False


def _cli(state: Path, bootstrap: str, port: int, *args: str, **kw):
    return rtrl_argv(*args, overrides=[f'state_dir="{state}"', f'kafka.bootstrap_servers="{bootstrap}"',
                                       f"collector.port={port}"])


def test_detached_collector_serves_until_rtrl_down(stack, tmp_path):
    state, port = tmp_path / "state", free_port()
    bootstrap = stack.cfg.kafka.bootstrap()
    key = subprocess.run(_cli(state, bootstrap, port, "collector", "--keys-new", "web", "--org", ORG, "--role",
                              "serving"), capture_output=True, text=True, cwd=REPO, timeout=60).stdout.strip()
    out = subprocess.run(_cli(state, bootstrap, port, "collector", "--detach"), capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    url = f"http://127.0.0.1:{port}"
    try:
        assert out.returncode == 0, out.stderr
        assert url in out.stdout
        ids = valid(3)
        r = _post(url, json.dumps({"events": ids}).encode(), {"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["accepted"] == 3
    finally:
        down = subprocess.run(_cli(state, bootstrap, port, "down"), capture_output=True, text=True, cwd=REPO,
                              timeout=120)
    assert "collector" in down.stdout
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=5)


def test_foreground_collector_stops_cleanly_on_ctrl_c(stack, tmp_path):
    state, port = tmp_path / "state", free_port()
    proc = subprocess.Popen(_cli(state, stack.cfg.kafka.bootstrap(), port, "collector"), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:

        def up() -> bool:
            assert proc.poll() is None, "collector exited before it came up"
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 60, "the collector's /healthz answering 200", interval_s=0.2)
        os.kill(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = proc.stdout.read()
    assert rc in (0, 130), output  # 130: the CLI's exit status for Ctrl-C
    assert f"http://127.0.0.1:{port}" in output
    assert "Application shutdown complete" in output and "collector: stopped" in output
