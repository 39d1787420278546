"""The whole ingest path under a broker outage: SDK clients (one straight to Kafka, one through the HTTP collector)
keep emitting while the broker is stopped and restarted; every event reaches the Parquet archive exactly once."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from instrumentation import KafkaTransport, TelemetryClient
from schemas.api_keys import KeyStore
from instrumentation.collector_client import CollectorTransport
from pipelines.archive.reader import archived_event_ids, read_events
from schemas.samples import sample_events
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).parents[2]


def cli_argv(cfg, *args: str) -> list[str]:
    overrides = [f'state_dir="{cfg.state_dir}"', f"kafka.port={cfg.kafka.port}", f"collector.port={cfg.collector.port}",
                 f"kafka.storage_engine={cfg.kafka.storage_engine}", "archive.batch_max_seconds=0.5"]
    return rtrl_argv(*args, overrides=overrides)


def emit_until(client: TelemetryClient, events: list, stop: threading.Event, emitted: list) -> None:
    for e in events:
        if stop.is_set():
            return
        client.emit(e)
        emitted.append(e.event_id)
        time.sleep(0.002)  # paces the stream of emits (the workload), not a wait for anything


def test_every_event_emitted_across_a_broker_restart_is_archived_exactly_once(private_stack, tmp_path):
    cfg = private_stack.cfg
    sdk_cfg = cfg.sdk.model_copy(update={"retry_interval_s": 0.2, "send_timeout_s": 3.0, "linger_ms": 5,
                                         "batch_size": 100})
    key = KeyStore(cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json")).create(
        "e2e", org="*", role="serving")  # sample events span seven orgs and include trajectories
    subprocess.run(cli_argv(cfg, "collector", "--detach"), check=True, cwd=REPO, capture_output=True, timeout=120)
    archiver = subprocess.Popen(cli_argv(cfg, "archive"), cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / "archiver.log", "w"))
    direct = TelemetryClient(KafkaTransport(cfg.kafka.bootstrap(), timeout_s=3.0), sdk_cfg, tmp_path / "spool-direct",
                             name="direct")
    via_http = TelemetryClient(CollectorTransport(f"http://127.0.0.1:{cfg.collector.port}", key, timeout_s=3.0),
                               sdk_cfg, tmp_path / "spool-http", name="http")
    stop = threading.Event()
    emitted: list[str] = []
    emitted_http: list[str] = []
    recent = datetime.now(timezone.utc) - timedelta(seconds=1060)  # the collector rejects times far from its clock
    threads = [threading.Thread(target=emit_until, args=(direct, sample_events(4000, seed=11), stop, emitted)),
               threading.Thread(target=emit_until, args=(via_http, sample_events(4000, seed=12, start=recent), stop,
                                                         emitted_http))]
    try:
        for t in threads:
            t.start()
        clients = (direct, via_http)
        wait_for(lambda: all(c.stats()["sent"] for c in clients), 60, "both clients delivering before the outage",
                 interval_s=0.05)
        private_stack.broker.proc.stop()       # the broker goes away while both clients are emitting
        wait_for(lambda: all(c.stats()["spooled"] for c in clients), 60,
                 "both clients spooling during the outage (a failed send each)", interval_s=0.1)
        private_stack.broker.start()           # its log lives on in the object store
        wait_for(lambda: all(c.stats()["resent"] for c in clients), 90,
                 "both clients replaying their spools to the restarted broker", interval_s=0.1)
        stop.set()
        for t in threads:
            t.join()
        # each flush replays the spool once; the collector's producer may still be in its reconnect back-off
        wait_for(lambda: direct.flush(10) and via_http.flush(10), 90, "both clients' spools drained")
        stats = [direct.stats(), via_http.stats()]
        assert all(sum(s["dropped"].values()) == 0 for s in stats), stats

        want = set(emitted) | set(emitted_http)
        root = cfg.path_or_default(cfg.archive.output_dir, "archive")
        wait_for(lambda: want <= archived_event_ids(root), 90,
                 lambda: f"all {len(want)} events archived ({len(want - archived_event_ids(root))} missing)")
        rows = read_events(root, dedupe=False)
        ours = rows.filter(rows["event_id"].is_in(list(want)))
        assert ours.height == len(want), f"{ours.height - len(want)} duplicate rows in the archive"
    finally:
        stop.set()
        archiver.send_signal(signal.SIGTERM)
        archiver.wait(timeout=60)
        direct.close(5)
        via_http.close(5)
