"""The archiver against the real Tansu broker: every event archived once, even when the archiver is SIGKILLed
mid-batch again and again; malformed messages land in the dead-letter outputs without stopping it."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from infra.argv import rtrl_argv
from infra.config import load_config
from pipelines.archive.archiver import Archiver
from pipelines.archive.durable import is_temp
from pipelines.archive.manifest import load_manifests
from pipelines.archive.reader import archived_event_ids, event_table_schema, read_dead_letters, read_events
from schemas import DEAD_LETTER_TOPIC, EVENT_TYPES, Event, to_wire, topic_for
from tests.unit.archive.helpers import make_event
from tests.waiting import wait_for

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]


def overrides(cfg, root: Path, *extra: str) -> list[str]:
    """The fixture's config (state dir, broker port) with the archive written to `root`."""
    return [f'state_dir="{cfg.state_dir}"', f"kafka.port={cfg.kafka.port}", f'archive.output_dir="{root}"', *extra]


def marked_events(n: int, org: str) -> list[Event]:
    types = sorted(EVENT_TYPES)
    return [make_event(types[i % len(types)], user_id=f"u-{i % 11}", org_id=org) for i in range(n)]


def produce(bootstrap: str, events: list[Event], chunk: int = 0, pause_s: float = 0.0) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        step = chunk or len(events)
        for i in range(0, len(events), step):
            futures = [producer.send(topic_for(e.event_type), key=e.user_id.encode(), value=to_wire(e))
                       for e in events[i:i + step]]
            producer.flush()
            for f in futures:
                f.get(timeout=30)
            if pause_s:
                time.sleep(pause_s)  # paces the production (the workload): events keep arriving over time
    finally:
        producer.close()


def test_every_produced_event_is_archived_once_with_its_arrow_types(stack, tmp_path):
    org = f"org-{uuid.uuid4().hex[:8]}"  # the shared broker also carries other tests' events
    events = marked_events(100 * len(EVENT_TYPES), org)      # 100 of each type
    produce(stack.cfg.kafka.bootstrap(), events)
    cfg = load_config(None, overrides(stack.cfg, tmp_path / "archive", "archive.batch_max_events=200"))
    stats = Archiver.from_config(cfg, log=lambda _: None).run(until_idle_s=2.0)

    mine = read_events(tmp_path / "archive", dedupe=False).filter(pl.col("org_id") == org)
    assert mine.height == len(events)
    assert sorted(mine["event_id"]) == sorted(e.event_id for e in events)
    assert stats.events_written >= len(events) and stats.batches >= 4
    for t in EVENT_TYPES:
        frame = read_events(tmp_path / "archive", t).filter(pl.col("org_id") == org)
        assert frame.height == 100
        assert frame.schema == pl.from_arrow(event_table_schema(t).empty_table()).schema
    for m in load_manifests(tmp_path / "archive"):
        for f in m.files:
            if f.kind == "events":
                assert pq.read_schema(tmp_path / "archive" / f.path).equals(event_table_schema(f.event_type))


def _start_archiver(cfg, root: Path, log_path: Path, *args: str) -> subprocess.Popen:
    argv = rtrl_argv("archive", *args,
                     overrides=overrides(cfg, root, "archive.batch_max_events=40", "archive.batch_max_seconds=0.2"))
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def _manifest_count(root: Path) -> int:
    """Committed manifests only: a killed archiver can leave a temporary one, which the next start deletes."""
    if not (root / "_manifests").exists():
        return 0
    return sum(1 for p in (root / "_manifests").rglob("*.json") if not is_temp(p))


def test_sigkill_mid_batch_and_restart_loses_and_duplicates_nothing(private_stack, tmp_path):
    cfg, root, log_path = private_stack.cfg, tmp_path / "archive", tmp_path / "archiver.log"
    events = marked_events(3500, "org-crash")
    producer = threading.Thread(target=produce, args=(cfg.kafka.bootstrap(), events, 70, 0.1))
    producer.start()
    try:
        # Kill at different moments: each time after the archiver has committed something, a little later each time.
        for delay in (0.0, 0.07, 0.15, 0.26, 0.4):
            proc = _start_archiver(cfg, root, log_path)
            seen = _manifest_count(root)
            wait_for(lambda: _manifest_count(root) > seen or proc.poll() is not None, 60,
                     lambda: "archiver made no progress:\n" + log_path.read_text()[-3000:], interval_s=0.02)
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert _manifest_count(root) > seen, "archiver made no progress:\n" + log_path.read_text()[-3000:]
            time.sleep(delay)  # the kill's moment within the archiver's next batch is what varies here
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        producer.join()
    final = subprocess.run(rtrl_argv("archive", "--until-idle", "3", overrides=overrides(cfg, root)),
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr + final.stdout[-3000:]
    summary = json.loads(final.stdout.strip().splitlines()[-1])["archive"]

    rows = read_events(root, dedupe=False)
    assert rows.height == len(events)                                   # none duplicated
    assert set(rows["event_id"]) == {e.event_id for e in events}        # none lost
    assert archived_event_ids(root) == {e.event_id for e in events}
    listed = {f.path for m in load_manifests(root) for f in m.files}
    assert {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")} == listed  # no orphan left behind
    assert not list(root.rglob(".tmp-*"))

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=cfg.kafka.bootstrap(), group_id=cfg.archive.group_id,
                             enable_auto_commit=False)
    try:
        committed = {name: consumer.committed(TopicPartition(name.rsplit("/", 1)[0], int(name.rsplit("/", 1)[1])))
                     for name in summary["positions"]}
    finally:
        consumer.close()
    assert committed == summary["positions"]  # monitoring offsets follow the manifests


def test_malformed_message_goes_to_dead_letter_outputs_and_archiving_goes_on(stack, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bootstrap = stack.cfg.kafka.bootstrap()
    org = f"org-{uuid.uuid4().hex[:8]}"
    bad = b'{"event_type": "tool_call_result", "marker": "' + org.encode() + b'", broken'
    good = marked_events(7, org)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    producer.send("telemetry.tools", key=b"u-1", value=bad).get(timeout=30)
    producer.close()
    produce(bootstrap, good)

    root = tmp_path / "archive"
    cfg = load_config(None, overrides(stack.cfg, root))
    stats = Archiver.from_config(cfg, log=lambda _: None).run(until_idle_s=2.0)

    assert stats.dead_letters.get("invalid_json", 0) >= 1
    dead = read_dead_letters(root).filter(pl.col("value") == bad)
    assert dead.height == 1
    row = dead.row(0, named=True)
    assert (row["topic"], row["reason"], row["field"]) == ("telemetry.tools", "invalid_json", "<event>")
    assert archived_event_ids(root) >= {e.event_id for e in good}  # produced after the bad one, still archived

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(DEAD_LETTER_TOPIC, p) for p in consumer.partitions_for_topic(DEAD_LETTER_TOPIC)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        found = []

        def poll() -> list:
            for recs in consumer.poll(timeout_ms=500).values():
                found.extend(r for r in recs if r.value == bad)
            return found

        wait_for(poll, 20, "the malformed message on the dead-letter topic", interval_s=0)
    finally:
        consumer.close()
    headers = {k: v.decode() for k, v in found[0].headers}
    assert headers["rtrl.dlq.reason"] == "invalid_json"
    assert headers["rtrl.dlq.source_topic"] == "telemetry.tools"
    assert headers["rtrl.dlq.source_offset"] == str(row["offset"])
    assert headers["rtrl.dlq.source_partition"] == str(row["partition"])


def test_detached_archiver_runs_in_the_background_and_down_stops_it_cleanly(stack, tmp_path):
    from infra.stack.process import ManagedProcess

    org = f"org-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "archive"
    # Its own state dir (so `down` stops only this archiver, never the shared broker), the shared broker's port.
    sets = [f'state_dir="{tmp_path / "state"}"', f"kafka.port={stack.cfg.kafka.port}", f'archive.output_dir="{root}"',
            "archive.batch_max_seconds=0.2"]
    started = subprocess.run(rtrl_argv("archive", "--detach", overrides=sets), cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout.strip().splitlines()[-1])
    assert info["archiver"] == "started"
    proc = ManagedProcess("archiver", tmp_path / "state")
    assert proc.info()["pid"] == info["pid"]

    events = marked_events(21, org)
    produce(stack.cfg.kafka.bootstrap(), events)
    wait_for(lambda: archived_event_ids(root) >= {e.event_id for e in events}, 60,
             lambda: f"the events archived by the detached archiver; its log:\n{proc.log_tail()}", interval_s=0.2)

    down = subprocess.run(rtrl_argv("down", overrides=sets), cwd=REPO, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0 and "archiver" in down.stdout
    assert not proc.is_running()
    assert "SIGTERM: committing the batch in flight" in proc.logfile.read_text()  # stopped by signal, not killed
