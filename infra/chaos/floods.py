"""Hostile replays produced straight to Kafka, as misbehaving clients and brokers deliver them:

    duplicates     the newest messages again, same bytes (same event_id), same partitions: client retries
    out_of_order   the newest messages again, shuffled (event times out of order) onto random partitions
    late_events    the oldest messages again: event times far behind the watermark, past the allowed lateness

Each is at-least-once delivery made visible: the reward job must drop every copy (dedupe by event_id, lateness by
event time) and never emit a second row or lose one.
"""

from __future__ import annotations

import json
import random
from datetime import datetime

from infra.chaos.kafka_io import Message, produce, read
from schemas.kafka_clients import KafkaTarget
from schemas.topics import EVENT_TOPICS


def _event_time(m: Message) -> datetime | None:
    try:
        return datetime.fromisoformat(json.loads(m.value)["event_time"].replace("Z", "+00:00"))
    except (ValueError, KeyError, TypeError):
        return None


def flood(kind: str, bootstrap: KafkaTarget, size: int, seed: int, partitions: int) -> dict:
    """Replay about `size` messages of the event topics as `kind`; what was sent, for the run's record."""
    per_partition = max(1, size // max(1, len(EVENT_TOPICS) * partitions))
    rng = random.Random(seed)
    if kind == "duplicates":
        msgs = read(bootstrap, EVENT_TOPICS, per_partition, newest=True, timeout_s=120)
        sent = produce(bootstrap, msgs)
    elif kind == "out_of_order":
        msgs = read(bootstrap, EVENT_TOPICS, per_partition, newest=True, timeout_s=120)
        rng.shuffle(msgs)
        sent = produce(bootstrap, msgs, partition_of=lambda m: rng.randrange(partitions))
    elif kind == "late_events":
        msgs = read(bootstrap, EVENT_TOPICS, per_partition, newest=False, timeout_s=120)
        rng.shuffle(msgs)
        sent = produce(bootstrap, msgs)
    else:
        raise ValueError(f"unknown flood {kind!r}")
    times = [t for t in map(_event_time, msgs) if t is not None]
    return {"messages": len(msgs), "acknowledged": sent,
            "trajectories": sum(m.topic == "trajectories" for m in msgs),
            "oldest_event_time": min(times).isoformat() if times else None,
            "newest_event_time": max(times).isoformat() if times else None}
