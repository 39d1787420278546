"""In-memory stand-ins for Kafka (a `Source` and a dead-letter sink) and event builders for archiver unit tests."""

from __future__ import annotations

from schemas.topics import EVENT_TOPICS

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

from pipelines.archive.archiver import Archiver
from pipelines.archive.config import ArchiveConfig
from pipelines.archive.messages import SourceMessage
from schemas import EVENT_TYPES, Event, parse_event, to_wire, topic_for

FIXTURES = Path(__file__).parents[3] / "schemas" / "fixtures"
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=timezone.utc)


def make_event(event_type: str = "suggestion_shown", event_time: datetime = T0, **fields) -> Event:
    """A valid event of `event_type` built from its newest fixture, with a fresh event_id."""
    newest = max((FIXTURES / event_type).glob("v*.json"), key=lambda p: int(p.stem[1:]))
    d = json.loads(newest.read_text())
    d.update(event_id=str(uuid.uuid4()), event_time=event_time.isoformat(), **fields)
    return parse_event(d)


def all_types(n: int, event_time: datetime = T0) -> list[Event]:
    types = sorted(EVENT_TYPES)
    return [make_event(types[i % len(types)], event_time, user_id=f"u-{i % 5}") for i in range(n)]


class FakeLog:
    """A Kafka log in memory: topic -> partitions -> list of (key, value)."""

    def __init__(self, partitions: int = 2):
        self.n = partitions
        self.records: dict[tuple[str, int], list[SourceMessage]] = {}

    def append(self, topic: str, value: bytes | None, key: bytes | None = None, partition: int | None = None) -> SourceMessage:
        p = partition if partition is not None else (hash(key) % self.n if key else 0)
        recs = self.records.setdefault((topic, p), [])
        m = SourceMessage(topic, p, len(recs), value, key, 1_700_000_000_000)
        recs.append(m)
        return m

    def produce(self, events: list[Event]) -> None:
        for e in events:
            self.append(topic_for(e.event_type), to_wire(e), e.user_id.encode(),
                        partition=sum(e.user_id.encode()) % self.n)


class FakeSource:
    """`Source` over a FakeLog. Each empty poll advances `clock` by the poll timeout (no real waiting)."""

    def __init__(self, log: FakeLog, topics: tuple[str, ...], cluster_id: str = "cluster-a", clock=None):
        self.log = log
        self.topics = topics
        self.cluster = cluster_id
        self.clock = clock
        self.pos: dict[tuple[str, int], int] = {}
        self.assigned: dict[tuple[str, int], int | None] = {}
        self.committed: dict[tuple[str, int], int] = {}
        self.commit_error: Exception | None = None
        self.closed = False

    def cluster_id(self) -> str:
        return self.cluster

    def partitions(self) -> list[tuple[str, int]]:
        return [(t, p) for t in self.topics for p in range(self.log.n)]

    def assign(self, positions):
        self.assigned = dict(positions)
        self.pos = {tp: (0 if off is None else off) for tp, off in positions.items()}

    def poll(self, max_records: int, timeout_ms: int) -> list[SourceMessage]:
        out: list[SourceMessage] = []
        for tp in sorted(self.pos):
            recs = self.log.records.get(tp, [])
            take = recs[self.pos[tp]:self.pos[tp] + max_records - len(out)]
            out.extend(take)
            self.pos[tp] += len(take)
            if len(out) >= max_records:
                break
        if not out and self.clock is not None:
            self.clock.advance(timeout_ms / 1000)
        return out

    def behind(self) -> bool:
        return any(self.pos[tp] < len(self.log.records.get(tp, [])) for tp in self.pos)

    def commit(self, positions):
        if self.commit_error is not None:
            raise self.commit_error
        self.committed.update(positions)

    def close(self):
        self.closed = True


class RecordingSink:
    def __init__(self, fail: Exception | None = None):
        self.published: list = []
        self.fail = fail

    def publish(self, letters, cluster_id):
        if self.fail is not None:
            raise self.fail
        self.published.extend((d, cluster_id) for d in letters)

    def close(self):
        pass


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


TOPICS = EVENT_TOPICS


def make_archiver(root: Path, log: FakeLog, cluster_id: str = "cluster-a", sink=None, fault=None,
                  wall_clock=None, **cfg) -> tuple[Archiver, FakeSource]:
    clock = FakeClock()
    source = FakeSource(log, TOPICS, cluster_id, clock)
    kw = {"fault": fault} if fault is not None else {}
    if wall_clock is not None:
        kw["wall_clock"] = wall_clock
    a = Archiver(root, ArchiveConfig(**cfg), source, sink or RecordingSink(), log=lambda _: None, clock=clock, **kw)
    return a, source


def archive_all(root: Path, log: FakeLog, **kw):
    """Run an archiver over the fake log until it is idle; return (stats, source)."""
    a, source = make_archiver(root, log, **kw)
    stats = a.run(until_idle_s=1.0)
    return stats, source
