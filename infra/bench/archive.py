"""`rtrl bench archive`: archive throughput, events/s from Kafka to durable, manifested Parquet (one JSON object).

    rtrl [--set archive.check_crcs=false --set kafka.storage_engine=memory] bench archive [--events 100000]
        [--batch 50000] [--bootstrap HOST:PORT]

Without --bootstrap it starts a private embedded broker in a temporary state dir (and stops it afterwards).
It produces `--events` events of every type (fixture-shaped, fresh ids, acks=all), then runs the archiver from an
empty archive until idle. `archive_events_per_s` = events written / (first record consumed -> last batch
committed); `wall_s` also counts start-up (connect, recovery), not the final idle wait.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable
from schemas.kafka_clients import KafkaTarget


def _events(n: int):
    from schemas import EVENT_TYPES, parse_event

    fixtures = Path(__file__).parents[2] / "schemas" / "fixtures"
    base = {}
    for t in sorted(EVENT_TYPES):
        newest = max((fixtures / t).glob("v*.json"), key=lambda p: int(p.stem[1:]))
        base[t] = json.loads(newest.read_text())
    types = sorted(base)
    for i in range(n):
        d = dict(base[types[i % len(types)]], event_id=str(uuid.uuid4()), user_id=f"u-{i % 997}")
        yield parse_event(d)


def _produce(bootstrap: KafkaTarget, n: int) -> dict:
    from kafka import KafkaProducer

    from schemas import to_wire, topic_for
    from schemas.kafka_clients import kafka_client_args

    p = KafkaProducer(**kafka_client_args(bootstrap), acks="all", linger_ms=20, batch_size=512 * 1024)
    t0, size, futures = time.monotonic(), 0, []
    for e in _events(n):
        v = to_wire(e)
        size += len(v)
        futures.append(p.send(topic_for(e.event_type), key=e.user_id.encode(), value=v))
    p.flush()
    for f in futures:
        f.get(timeout=60)
    p.close()
    dt = time.monotonic() - t0
    return {"produced": n, "produce_s": round(dt, 2), "produce_events_per_s": round(n / dt), "avg_bytes": size // n}


def run(events: int = 100_000, batch: int = 50_000, bootstrap: str = "", config_path: str | None = None,
        overrides: tuple[str, ...] = (), log: Callable[[str], None] = print) -> dict:
    """Produce `events`, archive them from an empty archive in a temporary state dir; `overrides` come last."""
    from infra.bench.ports import free_port
    from infra.config import load_config
    from pipelines.archive.archiver import Archiver

    with tempfile.TemporaryDirectory(prefix="rtrl-archive-bench-") as tmp:
        sets = [f'state_dir="{tmp}/state"', f'archive.output_dir="{tmp}/archive"',
                f"archive.batch_max_events={batch}"]
        stack = None
        if bootstrap:
            sets.append(f'kafka.bootstrap_servers="{bootstrap}"')
        else:
            sets.append(f"kafka.port={free_port(pair=True)}")
        cfg = load_config(config_path, sets + list(overrides))
        if not bootstrap:
            from infra.stack.stack import Stack

            log(f"bench: starting a private broker in {tmp}")
            stack = Stack(cfg)
            stack.up(log=lambda *_: None)
        try:
            log(f"bench: producing {events} events to {cfg.kafka.bootstrap()}")
            out = _produce(cfg.kafka, events)
            log("bench: archiving them until idle")
            t0 = time.monotonic()
            last_commit = [t0]

            def archiver_log(line: str) -> None:
                if line.startswith("archive: batch"):
                    last_commit[0] = time.monotonic()

            stats = Archiver.from_config(cfg, log=archiver_log).run(until_idle_s=2.0)
            wall = last_commit[0] - t0  # start-up (connect, recovery) + archiving, without the idle wait
            out.update(archived=stats.events_written, batches=stats.batches, files=stats.files_written,
                       bytes_written=stats.bytes_written, archive_busy_s=round(stats.busy_s, 2),
                       archive_events_per_s=round(stats.events_per_s), wall_s=round(wall, 2),
                       wall_events_per_s=round(stats.events_written / wall), batch_max_events=batch,
                       storage_engine=cfg.kafka.storage_engine, check_crcs=cfg.archive.check_crcs)
        finally:
            if stack is not None:
                stack.down(log=lambda *_: None)
    return out
