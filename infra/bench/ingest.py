"""`rtrl bench ingest`: the ingest path measured end to end on a private embedded stack.

Stages, each on the same freshly started stack (own state dir, free ports):
  1. SDK -> Kafka: `TelemetryClient.emit` latency per call (p50/p99 µs), then the sender's produce rate until
     every event is acknowledged (acks=all).
  2. Collector -> Kafka: the collector runs as its own process (as in production); two client threads post
     batches of 500 events with `CollectorTransport`; the rate counts only acknowledged (200) batches.
  3. Archive: the archiver drains every topic to Parquet; `events_archived` counts the sent event_ids found
     in the archive (each at most once), so `events_archived == events_sent` is the delivery check.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from infra.argv import rtrl_argv
from infra.bench.ports import free_port
from infra.config import load_config
from infra.stack.process import ManagedProcess
from infra.stack.stack import Stack
from schemas.samples import sample_events

BATCH = 500


def _percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _sdk_stage(cfg, events, log) -> dict:
    from instrumentation import KafkaTransport, TelemetryClient

    client = TelemetryClient(KafkaTransport(cfg.kafka), cfg.sdk, cfg.state_path / "spool" / "bench",
                             name="bench")
    now = time.perf_counter_ns
    lat = [0] * len(events)
    t0 = time.perf_counter()
    for i, e in enumerate(events):
        s = now()
        client.emit(e)
        lat[i] = now() - s
    emitted = time.perf_counter()
    if not client.flush(timeout=600):
        raise RuntimeError("SDK did not finish sending within 600 s")
    t1 = time.perf_counter()
    stats = client.stats()
    client.close()
    lat.sort()
    log(f"sdk: {len(events)} events emitted in {emitted - t0:.2f}s, acknowledged after {t1 - t0:.2f}s")
    return {"sdk_enqueue_us_p50": round(_percentile(lat, 0.5) / 1000, 3),
            "sdk_enqueue_us_p99": round(_percentile(lat, 0.99) / 1000, 3),
            "kafka_produce_events_per_s": round(stats["sent"] / (t1 - t0), 1),
            "sdk_sent": stats["sent"], "sdk_spooled": stats["spooled"], "sdk_dropped": sum(stats["dropped"].values())}


def bench_key(cfg) -> str:
    from schemas.api_keys import KeyStore

    return KeyStore(cfg.path_or_default(cfg.collector.api_keys_file, "collector_keys.json")).create(
        "bench", org="*", role="serving")  # the sample events span seven orgs and include trajectories


def _collector_stage(cfg, config_path, overrides, events, log, key: str | None = None) -> dict:
    from instrumentation.collector_client import CollectorTransport
    from instrumentation.transport import Record
    import subprocess

    key = key or bench_key(cfg)
    argv = rtrl_argv("collector", "--detach", config=config_path, overrides=overrides)
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=120)
    url = f"http://{cfg.collector.host}:{cfg.collector.port}"
    batches = [[Record.of(e) for e in events[i:i + BATCH]] for i in range(0, len(events), BATCH)]
    errors: list[str] = []
    sent = [0]
    lock = threading.Lock()

    def worker(mine):
        transport = CollectorTransport(url, key, timeout_s=30)
        try:
            for b in mine:
                transport.send(b)
                with lock:
                    sent[0] += len(b)
        except Exception as e:  # noqa: BLE001 -- reported in the JSON, the bench must finish
            errors.append(f"{type(e).__name__}: {e}")
        finally:
            transport.close()

    threads = [threading.Thread(target=worker, args=(batches[k::2],)) for k in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    log(f"collector: {sent[0]} events accepted in {elapsed:.2f}s ({len(errors)} errors)")
    return {"collector_events_per_s": round(sent[0] / elapsed, 1), "collector_sent": sent[0],
            "collector_errors": errors[:5]}


def _archive_stage(cfg, expected_ids: set[str], log) -> dict:
    from pipelines.archive.archiver import Archiver
    from pipelines.archive.layout import archive_root
    from pipelines.archive.reader import archived_event_ids

    archiver = Archiver.from_config(cfg, log=lambda *_: None)
    t0 = time.perf_counter()
    try:
        archiver.start()
        archiver.run(until_idle_s=3.0)
    finally:
        archiver.close()
    elapsed = time.perf_counter() - t0
    found = archived_event_ids(archive_root(cfg))
    archived = len(expected_ids & found)
    log(f"archive: {archived} of {len(expected_ids)} sent events archived in {elapsed:.2f}s (incl. 3 s idle wait)")
    return {"events_archived": archived, "archive_events_per_s": round(len(found) / max(elapsed - 3.0, 1e-6), 1)}


@contextmanager
def private_stack(config_path: str | None, base_overrides: tuple[str, ...], log: Callable[[str], None]):
    """The given configuration on a stack of its own (a temp state dir, free ports), up: (cfg, its overrides).
    Everything it started (the collector too) is stopped and the state removed on the way out."""
    tmp = Path(tempfile.mkdtemp(prefix="rtrl-bench-ingest-"))
    overrides = [*base_overrides, f'state_dir="{tmp}"', f"kafka.port={free_port(pair=True)}",
                 f"collector.port={free_port()}", f"mlflow.ui_port={free_port()}"]
    cfg = load_config(config_path, overrides)
    stack = Stack(cfg)
    try:
        log(f"bench: starting a private stack in {tmp}")
        stack.up(log=lambda *_: None)
        yield cfg, overrides
    finally:
        ManagedProcess("collector", cfg.state_path).stop()
        stack.down(log=lambda *_: None)
        shutil.rmtree(tmp, ignore_errors=True)


def collector_events(n_events: int, seed: int) -> list:
    """Sample events the collector accepts: their times end a minute before now (it rejects times far from its
    clock)."""
    return sample_events(n_events, seed=seed, start=datetime.now(timezone.utc) - timedelta(
        seconds=0.25 * n_events + 60))


def run(n_events: int, config_path: str | None = None, base_overrides: tuple[str, ...] = (),
        log: Callable[[str], None] = print) -> dict:
    """Measure on a private stack: the given configuration, with its own temp state dir and free ports."""
    with private_stack(config_path, base_overrides, log) as (cfg, overrides):
        sdk_events = sample_events(n_events, seed=1)
        posted = collector_events(n_events, seed=2)
        result = {"events_sent": 2 * n_events, "event_bytes_mean": round(statistics.mean(
            len(e.model_dump_json()) for e in sdk_events[:2000]), 1)}
        result |= _sdk_stage(cfg, sdk_events, log)
        result |= _collector_stage(cfg, config_path, overrides, posted, log)
        result |= _archive_stage(cfg, {e.event_id for e in sdk_events + posted}, log)
        return {"storage_engine": cfg.kafka.storage_engine, **result}


def collector_cost(n_events: int, rounds: int, config_path: str | None = None, base_overrides: tuple[str, ...] = (),
                   log: Callable[[str], None] = print) -> dict:
    """The collector stage with collector.metrics off and on, alternating, `n_events` new events each round, on one
    private stack (infra/bench/metrics_cost.py)."""
    from infra.bench.metrics_cost import alternate

    seeds = iter(range(10, 10 + 2 * rounds))
    with private_stack(config_path, base_overrides, log) as (cfg, overrides):
        key = bench_key(cfg)

        def measure(on: bool) -> float:
            try:
                out = _collector_stage(cfg, config_path, [*overrides, f"collector.metrics={'true' if on else 'false'}"],
                                       collector_events(n_events, next(seeds)), log, key=key)
            finally:
                ManagedProcess("collector", cfg.state_path).stop()
            if out["collector_errors"]:
                raise RuntimeError(f"collector errors: {out['collector_errors']}")
            return out["collector_events_per_s"]

        return {**alternate(measure, rounds, log), "events_per_round": n_events, "rounds": rounds}
