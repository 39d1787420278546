"""Regression (found by `rtrl chaos`): a broker slow to deliver data it holds (Tansu over its object store under
load answered fetches with nothing for ~20 s) made `fix_range` end the range on the first quiet polls, before a
partition was read to the log end it had snapshotted. The watermark, which lets idle partitions not hold it back,
then moved past requests still unread in that partition, and the next cycle dropped them as late: lost rewards.

The broker here is a stand-in consumer whose partitions answer empty polls for a while before their records."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from pipelines.rewards import kafka_range

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass
class Rec:
    offset: int
    value: bytes


def _value(minutes: int) -> bytes:
    t = T0 + timedelta(minutes=minutes)
    return f'{{"event_time": "{t.isoformat()}", "received_time": "{(t + timedelta(seconds=1)).isoformat()}"}}'.encode()


class SlowConsumer:
    """`logs`: (topic, partition) -> records; `silent_s`: (topic, partition) -> seconds of empty polls first."""

    def __init__(self, logs: dict, silent_s: dict):
        self.logs, self.silent_s = logs, silent_s
        self.pos: dict = {}

    def assign(self, tps):
        self.tps, self.t0 = list(tps), time.monotonic()   # silence counts from the first fetch

    def seek(self, tp, offset):
        self.pos[tp] = offset

    def end_offsets(self, tps):
        return {tp: len(self.logs[(tp.topic, tp.partition)]) for tp in tps}

    def poll(self, timeout_ms=0):
        time.sleep(timeout_ms / 1000 / 4)  # a poll blocks a while, like a broker's (fix_range has no clock to inject)
        out = {}
        for tp in self.tps:
            k = (tp.topic, tp.partition)
            if time.monotonic() - self.t0 < self.silent_s.get(k, 0.0):
                continue
            recs = self.logs[k][self.pos[tp]:self.pos[tp] + 2]
            if recs:
                out[tp] = recs
                self.pos[tp] += len(recs)
        return out

    def close(self):
        pass


@pytest.fixture
def broker(monkeypatch):
    def install(logs: dict, silent_s: dict) -> None:
        consumer = SlowConsumer(logs, silent_s)
        monkeypatch.setattr(kafka_range, "_consumer", lambda bootstrap: consumer)
        monkeypatch.setattr(kafka_range, "partitions_of", lambda bootstrap, topics: sorted(logs))
        monkeypatch.setattr(kafka_range, "cluster_id", lambda bootstrap: "test-cluster")
    return install


def test_a_range_is_not_ended_by_quiet_polls_before_a_slow_partition_reaches_its_log_end(broker):
    slow = ("trajectories", 0)
    broker({slow: [Rec(i, _value(i)) for i in range(5)]}, {slow: 1.0})
    r = kafka_range.fix_range("unused:0", ("trajectories",), {}, idle_s=0.3)
    assert r.stop == {"trajectories/0": 5} and r.records == 5


def test_the_watermark_waits_for_a_slow_partition_holding_older_requests(broker):
    fast, slow = ("telemetry.edits", 0), ("trajectories", 0)
    broker({fast: [Rec(0, _value(600))], slow: [Rec(i, _value(i)) for i in range(4)]}, {slow: 1.0})
    r = kafka_range.fix_range("unused:0", ("telemetry.edits", "trajectories"), {}, idle_s=0.3)
    assert r.stop["trajectories/0"] == 4, "the slow partition must be read to its end before the range ends"
    assert r.newest["trajectories/0"] == (T0 + timedelta(minutes=3)).isoformat()


def test_a_broker_that_never_delivers_fails_the_range_instead_of_fixing_a_short_one(broker):
    stuck = ("trajectories", 0)
    broker({stuck: [Rec(0, _value(0))]}, {stuck: 60.0})
    with pytest.raises(TimeoutError, match="trajectories/0"):
        kafka_range.fix_range("unused:0", ("trajectories",), {}, idle_s=0.2, catch_up_timeout_s=0.8)
