"""Raw Kafka access for a chaos run: read messages back (the newest or oldest of each partition, or all of a
topic) and produce raw messages (replays keep the original bytes, hence the original event_id)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pipelines.rewards.kafka_range import partitions_of
from schemas.kafka_clients import KafkaTarget, kafka_client_args


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


def _consumer(bootstrap: KafkaTarget):
    from kafka import KafkaConsumer

    return KafkaConsumer(**kafka_client_args(bootstrap), enable_auto_commit=False, group_id=None,
                         max_poll_records=5000, request_timeout_ms=20000)


def read(bootstrap: KafkaTarget, topics: tuple[str, ...], per_partition: int | None = None, newest: bool = True,
         idle_s: float = 2.0, timeout_s: float = 300.0) -> list[Message]:
    """Up to `per_partition` messages of each partition of `topics` (None: all of them): the newest ones (from
    the reported end backwards; Tansu's end offset may lag, so a few newer ones can come too) or the oldest.
    Every partition is read up to the end the broker reported (however slowly it delivers), then on until all
    have been quiet for `idle_s`."""
    from kafka import TopicPartition

    tps = [TopicPartition(t, p) for t, p in partitions_of(bootstrap, topics)]
    if not tps:
        return []
    c = _consumer(bootstrap)
    try:
        c.assign(tps)
        begin, end = c.beginning_offsets(tps), c.end_offsets(tps)
        quota, target = {}, {}
        for tp in tps:
            start = begin[tp]
            if per_partition is not None and newest:
                start = max(begin[tp], end[tp] - per_partition)
            c.seek(tp, start)
            quota[tp] = per_partition
            target[tp] = end[tp] if per_partition is None or newest else min(end[tp], start + per_partition)
        behind = {tp for tp in tps if target[tp] > c.position(tp)}
        out: list[Message] = []
        last = time.monotonic()
        while behind or time.monotonic() - last < idle_s:
            if time.monotonic() - last > timeout_s:
                raise TimeoutError(f"reading {sorted(map(str, behind))} from {bootstrap}: nothing for {timeout_s:.0f}s")
            for tp, records in c.poll(timeout_ms=200).items():
                for r in records:
                    if quota[tp] is not None and quota[tp] <= 0:
                        break
                    if r.value is not None:
                        out.append(Message(r.topic, r.partition, r.offset, r.key, r.value))
                    if quota[tp] is not None:
                        quota[tp] -= 1
                    if r.offset + 1 >= target[tp]:
                        behind.discard(tp)
                last = time.monotonic()
            if not behind and all(q is not None and q <= 0 for q in quota.values()):
                break
        return out
    finally:
        c.close()


def produce(bootstrap: KafkaTarget, messages: list[Message], partition_of=None, timeout_s: float = 30.0) -> int:
    """Produce `messages` in the given order (acks=all); `partition_of(message)` picks the partition (default:
    the original one). Returns how many were acknowledged."""
    from kafka import KafkaProducer

    p = KafkaProducer(**kafka_client_args(bootstrap), acks="all", linger_ms=5,
                      request_timeout_ms=int(timeout_s * 1000), max_block_ms=int(timeout_s * 1000))
    try:
        futures = [p.send(m.topic, value=m.value, key=m.key,
                          partition=m.partition if partition_of is None else partition_of(m)) for m in messages]
        p.flush(timeout=timeout_s)
        return sum(1 for f in futures if f.succeeded())
    finally:
        p.close(timeout=5)
