"""No single event can move a cycle's cut-off (as_of, the range's event-time watermark) beyond its receipt time plus
the skew. The failure this guards against: one event dated 2099 made a cycle's as_of 2099-12-31; the next cycle, with a
genuine trajectory, suggestion and edit, reported late_requests 1, late_events 2, rows 0, and so did every cycle
after it.

The cycles here are the real reward job (`run_cycle`: range fixing, Beam pipeline, carry, manifests) over a
stand-in broker that serves the records appended to its in-memory partitions (no Kafka process in unit tests)."""

from __future__ import annotations

import time
from collections import namedtuple
from datetime import datetime, timedelta, timezone

import pytest

from pipelines.rewards import cycle_job, kafka_range
from pipelines.rewards.cycle_job import run_cycle
from pipelines.rewards.kafka_range import MAX_SKEW_S, watermark_time
from pipelines.rewards.spec import RewardSpec
from schemas import to_wire, topic_for
from schemas.reward_table import read_reward_table
from tests.unit.rewards.builders import T0, applied, at, shown, snapshot, trajectory

SPEC = RewardSpec()
PUSH = SPEC.maturity_delay_s() + SPEC.allowed_lateness_s + 60  # traffic this long after a request makes it mature
Rec = namedtuple("Rec", "topic partition offset value key timestamp")
Y2099 = datetime(2099, 12, 31, tzinfo=timezone.utc)


# -- the bound itself --------------------------------------------------------------------------------------------------
def _wire(event_time: datetime, received_time: datetime | None) -> bytes:
    r = f', "received_time": "{received_time.isoformat()}"' if received_time else ""
    return f'{{"event_time": "{event_time.isoformat()}"{r}}}'.encode()


def test_an_event_time_within_the_skew_of_its_receipt_counts_as_it_is():
    assert watermark_time(_wire(at(10), at(0)), None) == at(10)
    assert watermark_time(_wire(at(-3600), at(0)), None) == at(-3600)  # sent late: its own time


def test_an_event_time_past_receipt_plus_skew_counts_as_receipt_plus_skew():
    assert watermark_time(_wire(Y2099, at(0)), None) == at(MAX_SKEW_S)
    assert watermark_time(_wire(Y2099, at(0)), None, max_skew_s=60) == at(60)


def test_without_received_time_the_kafka_timestamp_is_the_receipt():
    ms = int(at(0).timestamp() * 1000)
    assert watermark_time(_wire(Y2099, None), ms) == at(MAX_SKEW_S)


def test_an_event_with_no_receipt_time_at_all_does_not_move_the_watermark():
    assert watermark_time(_wire(Y2099, None), None) is None
    assert watermark_time(_wire(Y2099, None), -1) is None  # kafka-python's "no timestamp"


def test_a_receipt_at_the_end_of_representable_time_does_not_overflow():
    end = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    assert watermark_time(_wire(at(0), end), None) == at(0)


# -- cycles over a stand-in broker -----------------------------------------------------------------------------------
class Log:
    """Partitions as lists of records; consumers read them like kafka-python's KafkaConsumer."""

    def __init__(self):
        self.parts: dict[tuple[str, int], list[Rec]] = {}

    def append(self, events, received: datetime | None = None) -> None:
        for e in events:
            got = received or e.event_time + timedelta(seconds=1)
            e = e.model_copy(update={"received_time": got})
            k = (topic_for(e.event_type), 0)
            recs = self.parts.setdefault(k, [])
            recs.append(Rec(k[0], 0, len(recs), to_wire(e), e.user_id.encode(), int(got.timestamp() * 1000)))


class Consumer:
    def __init__(self, log: Log):
        self.log, self.pos, self.tps = log, {}, []

    def assign(self, tps):
        self.tps = list(tps)

    def seek(self, tp, offset):
        self.pos[tp] = offset

    def end_offsets(self, tps):
        return {tp: len(self.log.parts.get((tp.topic, tp.partition), [])) for tp in tps}

    def poll(self, timeout_ms=0):
        out = {}
        for tp in self.tps:
            recs = self.log.parts.get((tp.topic, tp.partition), [])[self.pos[tp]:]
            if recs:
                out[tp] = recs
                self.pos[tp] += len(recs)
        if not out:
            time.sleep(min(timeout_ms / 1000, 0.01))
        return out

    def close(self):
        pass


@pytest.fixture
def log(monkeypatch) -> Log:
    log = Log()
    monkeypatch.setattr(kafka_range, "_consumer", lambda bootstrap: Consumer(log))
    monkeypatch.setattr(kafka_range, "partitions_of", lambda bootstrap, topics: sorted(log.parts))
    monkeypatch.setattr(kafka_range, "cluster_id", lambda bootstrap: "stand-in")
    monkeypatch.setattr(cycle_job, "cluster_id", lambda bootstrap: "stand-in")
    return log


def request(rid: str, t: float) -> list:
    """A genuine request: trajectory, suggestion, edit applied, snapshot keeping the edit."""
    return [trajectory(rid, t), shown(rid, t + 5), applied(rid, t + 10, "ab"), snapshot(t + 600, "ab")]


def _cycle(tmp_path, cycle_id: str):
    m = run_cycle(cycle_id, "stand-in:0", tmp_path / "state", tmp_path / "rewards", SPEC, shards=1, idle_s=0.05,
                  log=lambda *_: None)
    rows = read_reward_table(tmp_path / "rewards", window=cycle_id) if m.partitions else None
    return m, (set() if rows is None else set(rows["request_id"].to_list()))


@pytest.mark.slow
def test_one_event_dated_2099_does_not_stop_reward_emission_for_the_cycles_after_it(log, tmp_path):
    # cycle 1: a genuine request, later traffic that makes it mature, and one trajectory dated 2099 received at 30 s
    log.append(request("r1", 0) + [snapshot(PUSH, "zz", file="f9")])
    log.append([trajectory("evil", 0).model_copy(update={"event_time": Y2099})], received=at(30))
    m1, rows1 = _cycle(tmp_path, "c1")
    assert rows1 == {"r1"}

    # cycles 2 and 3: genuine requests (trajectory, suggestion, edit, snapshot), each followed by traffic that
    # makes it mature: every row is emitted, nothing is late
    t = 0.0
    for cycle_id, rid in (("c2", "r2"), ("c3", "r3")):
        t += PUSH + 600
        log.append(request(rid, t) + [snapshot(t + PUSH, "zz", file="f9")])
        m, rows = _cycle(tmp_path, cycle_id)
        assert rows == {rid}, f"cycle {cycle_id} emitted {rows}, counters {m.counters}"
        assert m.counters.get("late_requests", 0) == 0 and m.counters.get("late_events", 0) == 0, m.counters
    # cycle 1's cut-off was the genuine traffic's: the 2099 event counted at most as its receipt (30 s) + skew
    assert datetime.fromisoformat(m1.as_of) == at(PUSH - SPEC.allowed_lateness_s)
