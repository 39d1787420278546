"""Bounded Kafka offset ranges: fix a cycle's range, and read it back inside Beam (ReadRangeItemsFn).

The embedded broker's high watermark cannot be trusted (see infra/stack/broker.py), so a range's end is fixed by
reading: every partition is consumed from its start offset until polls come back empty for `idle_s`; the next
offset after the last record read is the range's end, recorded before any output is written, so a rerun reads
exactly the same records. The same pass measures each partition's newest event time, for the event-time
watermark of the range.

Event times are client clocks, so no single event may move the watermark past its own receipt: each record counts
with min(event_time, receipt + `max_skew_s`), where receipt is the record's `received_time` (stamped by the
collector, or by the SDK's sender for direct-to-Kafka producers) or, without one, the Kafka record's timestamp; a
record with neither does not move the watermark. One event dated 2099 once set a cycle's as_of to 2099: that cycle
emitted immature rows and every later cycle found its requests late.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import apache_beam as beam
from apache_beam.metrics import Metrics
from pydantic import AwareDatetime, BaseModel, ValidationError

from pipelines.archive.deadletter import DeadLetter
from pipelines.archive.messages import SourceMessage
from pipelines.rewards import progress
from pipelines.rewards.batches import EventBatch
from pipelines.rewards.lateness import late_counts
from pipelines.rewards.parse import parse_one
from schemas.kafka_clients import KafkaTarget, bootstrap_of, kafka_client_args

Partition = tuple[str, int]


@dataclass
class FixedRange:
    start: dict[str, int]          # "topic/partition" -> first offset (inclusive)
    stop: dict[str, int]           # "topic/partition" -> end offset (exclusive)
    newest: dict[str, str]         # "topic/partition" -> newest event_time seen in the range (ISO), if any
    records: int
    cluster_id: str = ""           # the Kafka cluster (log incarnation) the offsets refer to


def key(tp: Partition) -> str:
    return f"{tp[0]}/{tp[1]}"


def parse_key(k: str) -> Partition:
    topic, p = k.rsplit("/", 1)
    return topic, int(p)


def _consumer(bootstrap: KafkaTarget):
    from kafka import KafkaConsumer

    return KafkaConsumer(**kafka_client_args(bootstrap), enable_auto_commit=False, group_id=None,
                         max_poll_records=5000, fetch_max_bytes=64 * 1024 * 1024)


def cluster_id(bootstrap: KafkaTarget) -> str:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(**kafka_client_args(bootstrap))
    try:
        return str(admin.describe_cluster().get("cluster_id") or "")
    finally:
        admin.close()


def partitions_of(bootstrap: KafkaTarget, topics: tuple[str, ...]) -> list[Partition]:
    c = _consumer(bootstrap)
    try:
        return sorted((t, p) for t in topics for p in (c.partitions_for_topic(t) or ()))
    finally:
        c.close()


MAX_SKEW_S = 300.0
"""How far after its receipt an event's time may count for the watermark. Equal to the collector's default
`max_event_skew_future_s` (which rejects events beyond it) and the quality suite's `max_clock_skew_s`; a smaller
value only holds the watermark back (rows are emitted by a later cycle), never loses a row."""


class _EventTime(BaseModel):
    event_time: AwareDatetime
    received_time: AwareDatetime | None = None


def _times(value: bytes | None) -> tuple[datetime, datetime | None] | None:
    """(event_time, received_time) of a wire message, or None (malformed messages are dead-lettered later)."""
    try:
        t = _EventTime.model_validate_json(value)
    except (ValidationError, TypeError):
        return None
    return t.event_time.astimezone(timezone.utc), t.received_time and t.received_time.astimezone(timezone.utc)


def _event_time(value: bytes | None) -> datetime | None:
    """The event time of a wire message, or None (malformed messages are dead-lettered later)."""
    times = _times(value)
    return None if times is None else times[0]


def watermark_time(value: bytes | None, kafka_timestamp_ms: int | None, max_skew_s: float = MAX_SKEW_S) \
        -> datetime | None:
    """The time a record may advance the watermark to: its event time, but at most its receipt + `max_skew_s`
    (receipt: its `received_time`, else the Kafka record timestamp). None when it has no event time or no receipt
    time to bound it by."""
    times = _times(value)
    if times is None:
        return None
    event_time, receipt = times
    if receipt is None and kafka_timestamp_ms is not None and kafka_timestamp_ms >= 0:
        receipt = datetime.fromtimestamp(kafka_timestamp_ms / 1000, timezone.utc)
    if receipt is None:
        return None
    try:
        return min(event_time, receipt + timedelta(seconds=max_skew_s))
    except OverflowError:  # receipt within max_skew_s of year 9999: no bound below the event time
        return event_time


def fix_range(bootstrap: KafkaTarget, topics: tuple[str, ...], start: dict[str, int], idle_s: float = 2.0,
              progress=None, catch_up_timeout_s: float = 300.0, max_skew_s: float = MAX_SKEW_S) -> FixedRange:
    """Read every partition from `start` to where the range ends, recording the stop offsets.

    Where it ends: first every partition is read up to the log end snapshotted when fixing started (however
    slowly the broker delivers it; TimeoutError after `catch_up_timeout_s` without a record); then on until every
    partition has been quiet for `idle_s`, and while traffic keeps arriving at most `3 * idle_s` longer (what
    arrives later belongs to the next cycle; the range must end). The snapshot is the broker's ListOffsets-latest,
    which Tansu reports as the last batch's base offset + 1, short of the true end; reading on until quiet (or for
    that grace) takes the rest of the batch. Either way the stop offsets are exactly what was read, so the next
    cycle starts there: nothing is skipped or read twice.

    Quiet polls do not end the range before the snapshot is reached: the watermark (`range_watermark`) lets idle
    partitions not hold it back, which is only right for a partition read to its end. A slow broker (an object
    store under load, a restart) can answer a fetch of data it holds with nothing for seconds; ending the range
    there advanced the watermark past requests still unread in that partition, and the next cycle dropped them
    as late (seen in a `rtrl chaos` run).

    `newest` holds each partition's newest `watermark_time` (event time bounded by receipt + `max_skew_s`)."""
    from kafka import TopicPartition

    parts = partitions_of(bootstrap, topics)
    cid = cluster_id(bootstrap)
    c = _consumer(bootstrap)
    try:
        tps = [TopicPartition(t, p) for t, p in parts]
        c.assign(tps)
        first = {tp: start.get(key((tp.topic, tp.partition)), 0) for tp in tps}
        for tp in tps:
            c.seek(tp, first[tp])
        ends = c.end_offsets(tps) if tps else {}
        behind = {tp for tp in tps if ends.get(tp, 0) > first[tp]}
        stop = {key(p): start.get(key(p), 0) for p in parts}
        newest: dict[str, str] = {}
        n, last_data, caught_up_at = 0, time.monotonic(), None
        while behind or time.monotonic() - last_data < idle_s:
            if caught_up_at is None and not behind:
                caught_up_at = time.monotonic()
            if caught_up_at is not None and time.monotonic() - caught_up_at > 3 * idle_s:
                break
            if behind and time.monotonic() - last_data > catch_up_timeout_s:
                raise TimeoutError(f"fixing the range: no record for {catch_up_timeout_s:.0f}s while "
                                   f"{sorted(key((tp.topic, tp.partition)) for tp in behind)} are still short of "
                                   f"the log end {bootstrap_of(bootstrap)} reported; is the broker up?")
            got = c.poll(timeout_ms=200)
            for tp, records in got.items():
                k = key((tp.topic, tp.partition))
                for r in records:
                    stop[k] = r.offset + 1
                    t = watermark_time(r.value, getattr(r, "timestamp", None), max_skew_s)
                    if t is not None and (k not in newest or t > newest[k]):
                        newest[k] = t
                n += len(records)
                if stop[k] >= ends.get(tp, 0):
                    behind.discard(tp)
            if got:
                last_data = time.monotonic()
                if progress:
                    progress(n)
        return FixedRange(start={key(p): start.get(key(p), 0) for p in parts}, stop=stop,
                          newest={k: t.isoformat() for k, t in newest.items()}, records=n, cluster_id=cid)
    finally:
        c.close()


def _ts(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(timezone.utc)


def range_watermark(r: FixedRange, lateness_s: float) -> datetime | None:
    """The event-time watermark of a fixed range: the newest event time in it (each bounded by its receipt + skew:
    `watermark_time`), minus the allowed lateness.

    Every partition was read to its end when the range was fixed, so a partition that is merely idle (no new
    traffic) must not hold the watermark back -- the idle-partition rule of Beam's and Flink's Kafka sources.
    Events older than this that arrive later are late (counted, per the reward spec's allowed lateness)."""
    if not r.newest:
        return None
    return max(_ts(t) for t in r.newest.values()) - timedelta(seconds=lateness_s)


class ReadKafkaRangeFn(beam.DoFn):
    """(topic, partition, start, stop) -> exactly those records, as `SourceMessage`s."""

    def __init__(self, bootstrap: KafkaTarget, timeout_s: float = 60.0):
        self.bootstrap, self.timeout_s = bootstrap, timeout_s
        self.read = Metrics.counter("rewards", "events_read")
        self.consumer = None

    def setup(self):
        self.consumer = _consumer(self.bootstrap)  # one connection per DoFn instance, reused for every partition

    def teardown(self):
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def process(self, element):
        from kafka import TopicPartition

        topic, partition, start, stop = element
        if stop <= start:
            return
        c = self.consumer
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek(tp, start)
        pos, deadline = start, time.monotonic() + self.timeout_s
        while pos < stop:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}/{partition}: read {pos - start} of {stop - start} records of the "
                                   f"fixed range [{start}, {stop}) before timing out; is the broker's log gone?")
            for records in c.poll(timeout_ms=500).values():
                progress.add("events_read", sum(1 for r in records if r.offset < stop))
                for r in records:
                    if r.offset >= stop:
                        pos = stop
                        break
                    pos = r.offset + 1
                    self.read.inc()
                    yield SourceMessage(r.topic, r.partition, r.offset, r.value, r.key, r.timestamp)
                deadline = time.monotonic() + self.timeout_s
        c.assign([])


class ReadRangeItemsFn(ReadKafkaRangeFn):
    """(topic, partition, start, stop) -> the bounded join's source items (pipelines/rewards/bounded.py): event
    batches of at most `batch_events` per type with the input older than `after` dropped (late, lateness.py), the
    dead letters as ("dead", DeadLetter), and the counts as ("counts", {...})."""

    def __init__(self, bootstrap: KafkaTarget, after: datetime | None, batch_events: int = 5000,
                 timeout_s: float = 60.0):
        super().__init__(bootstrap, timeout_s)
        self.after, self.batch_events = after, batch_events

    def process(self, element):
        counts: dict[str, int] = {}
        pending: dict[str, list] = {}

        def add(name: str, n: int = 1) -> None:
            counts[name] = counts.get(name, 0) + n

        def batch(event_type: str) -> EventBatch:
            return EventBatch.of(event_type, pending.pop(event_type))

        for message in super().process(element):
            add("events_read")
            out = parse_one(message)
            if isinstance(out, DeadLetter):
                add(f"dead_letter_{out.reason}")
                yield "dead", out
                continue
            add("events_parsed")
            if self.after is not None and out.event_time < self.after:
                for name, n in late_counts(out.event_type, 1).items():
                    add(name, n)
                continue
            events = pending.setdefault(out.event_type, [])
            events.append(out)
            if len(events) >= self.batch_events:
                yield batch(out.event_type)
        for event_type in sorted(pending):
            yield batch(event_type)
        yield "counts", counts
