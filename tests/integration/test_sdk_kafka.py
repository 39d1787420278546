"""The SDK against the real broker: events arrive with their ids, redacted and privacy-stripped on the wire, and
nothing emitted during a broker outage is lost (it is spooled and replayed after the restart)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

import pytest

from instrumentation import KafkaTransport, TelemetryClient
from schemas import EVENT_TYPES, topic_for
from schemas.topics import EVENT_TOPICS
from tests.conftest import make_config
from tests.unit.instrumentation.factories import edit, followup, snapshot, tool_result, trajectory
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GH_TOKEN = "ghp_R8tYv2LqX9mN4bK7wE1sD3fG6hJ0kL5pQzA2"


def sdk_config(tmp_path, *overrides: str):
    return make_config(tmp_path / "cfg", "sdk.retry_interval_s=0.2", "sdk.send_timeout_s=3", "sdk.linger_ms=5",
                       "sdk.batch_size=100", *overrides).sdk


def consume(bootstrap: str, partitions: dict[str, int], wanted: set[str], deadline_s: float = 30.0) -> list[dict]:
    """Every message on the event topics whose event_id is in `wanted`, read from the beginning by manual
    assignment (no consumer group). Polls until all of `wanted` is seen (AssertionError after `deadline_s`); the
    broker's end offsets are not trusted (Tansu under-reports the high watermark)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             request_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(t, p) for t in EVENT_TOPICS for p in range(partitions[t])])
        consumer.seek_to_beginning()
        found: list[dict] = []
        seen: set[str] = set()

        def poll() -> bool:
            for tp, records in consumer.poll(timeout_ms=200).items():
                for r in records:
                    try:  # the shared broker also carries other tests' messages, malformed ones included
                        d = json.loads(r.value)
                    except ValueError:
                        continue
                    if isinstance(d, dict) and d.get("event_id") in wanted:
                        found.append({**d, "_topic": tp.topic, "_key": r.key})
                        seen.add(d["event_id"])
            return wanted <= seen

        wait_for(poll, deadline_s, lambda: f"all {len(wanted)} events on the broker ({len(wanted - seen)} missing)",
                 interval_s=0)
        return found
    finally:
        consumer.close()


def partitions_of(stack) -> dict[str, int]:
    return {t: stack.cfg.kafka.partitions_for(t) for t in EVENT_TOPICS}


def fresh(factory, *args, **kw):
    return factory(*args, event_id=str(uuid.uuid4()), **kw)


def test_events_of_every_type_arrive_with_their_ids_redacted_and_private(stack, tmp_path):
    cfg = sdk_config(tmp_path)
    client = TelemetryClient(KafkaTransport(stack.cfg.kafka.bootstrap(), timeout_s=cfg.send_timeout_s), cfg,
                             tmp_path / "spool", name="it")
    events = []
    for i in range(60):
        events += [fresh(edit, i), fresh(snapshot), fresh(followup, f"still broken, my key is {AWS_KEY}"),
                   fresh(tool_result, f"git push failed: token {GH_TOKEN} rejected"),
                   fresh(trajectory, tool_error=f'bad args: {{"password": "hunter2-{i}"}}')]
    private = [fresh(followup, "this is my private code", privacy_mode=False) for _ in range(10)]
    private = [e.model_copy(update={"privacy_mode": True}) for e in private]
    before = datetime.now(timezone.utc)
    for e in events + private:
        assert client.emit(e)
    assert client.flush(30)
    client.close()
    after = datetime.now(timezone.utc)

    by_id = {e.event_id: e for e in events + private}
    got = consume(stack.cfg.kafka.bootstrap(), partitions_of(stack), set(by_id))
    assert {d["event_id"] for d in got} == set(by_id)
    assert {d["event_type"] for d in got} == {"edit_applied", "codebase_snapshot", "followup_message",
                                              "tool_call_result", "trajectory"}
    for d in got:
        assert d["_topic"] == topic_for(d["event_type"]) and d["_key"] == b"user-1"
        EVENT_TYPES[d["event_type"]].model_validate({k: v for k, v in d.items() if not k.startswith("_")})
        # stamped by the sender when it sent the event (no collector on this path)
        assert before <= datetime.fromisoformat(d["received_time"]) <= after
    wire = json.dumps([{k: v for k, v in d.items() if k != "_key"} for d in got])
    assert AWS_KEY not in wire and GH_TOKEN not in wire and "hunter2-" not in wire
    assert wire.count("[REDACTED:") == 3 * 60
    for d in got:
        if d["event_id"] in {e.event_id for e in private}:
            assert d["privacy_mode"] is True and d["text"] == ""


def test_events_emitted_while_the_broker_is_down_are_delivered_after_it_restarts(private_stack, tmp_path):
    cfg = sdk_config(tmp_path)
    bootstrap = private_stack.cfg.kafka.bootstrap()
    client = TelemetryClient(KafkaTransport(bootstrap, timeout_s=cfg.send_timeout_s), cfg, tmp_path / "spool",
                             name="outage")
    emitted: list[str] = []
    stop = threading.Event()

    def emit_continuously():
        i = 0
        while not stop.is_set():
            e = fresh(edit, i) if i % 2 else fresh(followup, f"message {i}")
            emitted.append(e.event_id)
            assert client.emit(e)
            i += 1
            time.sleep(0.002)  # paces the stream of emits (the workload), not a wait for anything

    emitter = threading.Thread(target=emit_continuously)
    emitter.start()
    try:
        wait_for(lambda: client.stats()["sent"] > 0, 30, "events delivered before the outage", interval_s=0.05)
        # Stop the broker process only: its log lives in the object store process, which keeps running, so
        # acknowledged messages survive (Broker.stop() would stop the object store too and lose the log).
        private_stack.broker.proc.stop()
        during_outage = len(emitted)
        # the first failing send takes up to send_timeout_s to give up
        first = wait_for(lambda: client.stats()["spooled"], 20, "a failed send spooled", interval_s=0.1)
        wait_for(lambda: client.stats()["spooled"] >= first + 2 * cfg.batch_size, 20,
                 "more batches spooled behind the failed one", interval_s=0.05)
        outage_stats = client.stats()
        private_stack.broker.start()
        # the emitter goes on while the spool is replayed to the restarted broker
        wait_for(lambda: client.stats()["resent"] > 0, 45, "spooled events resent after the restart", interval_s=0.1)
    finally:
        stop.set()
        emitter.join()
    assert len(emitted) > during_outage + 100  # emit kept accepting while the broker was down
    assert outage_stats["spooled"] > 0 and outage_stats["spooling"]

    wait_for(lambda: client.flush(10), 45, "the spool drained", interval_s=0)  # each flush retries the spool once
    stats = client.stats()
    client.close()
    assert stats["spool_bytes"] == 0 and not stats["spooling"] and stats["dropped"] == {}

    got = consume(bootstrap, partitions_of(private_stack), set(emitted))
    counts = Counter(d["event_id"] for d in got)
    assert set(counts) == set(emitted), f"{len(set(emitted) - set(counts))} of {len(emitted)} events lost"
    duplicates = sum(n - 1 for n in counts.values())
    print(f"\noutage: emitted {len(emitted)}, spooled {stats['spooled']}, resent {stats['resent']}, "
          f"sent directly {stats['sent']}, duplicates on the wire {duplicates}")
    assert duplicates <= cfg.batch_size  # only a batch whose acks were lost in the outage may be written twice
