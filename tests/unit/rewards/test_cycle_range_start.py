"""Where a reward cycle's Kafka range starts: after the previous cycle's stop offsets, unless the broker is a new
log incarnation (a memory broker restarted), whose offsets start over."""

from __future__ import annotations

from pipelines.rewards import cycle_job
from pipelines.rewards.cycle_job import CycleManifest, start_after


def _prev(cluster: str) -> CycleManifest:
    rng = {"start": {"trajectories/0": 0}, "stop": {"trajectories/0": 900, "telemetry.edits/0": 400},
           "newest": {}, "records": 1300, "cluster_id": cluster}
    return CycleManifest("c3", 3, "done", "c2", rng, None, None, "spec-1")


def test_the_next_range_starts_at_the_previous_stop_offsets_on_the_same_log(monkeypatch):
    monkeypatch.setattr(cycle_job, "cluster_id", lambda bootstrap: "rtrl-aaa")
    assert start_after(_prev("rtrl-aaa"), "127.0.0.1:9092") == {"trajectories/0": 900, "telemetry.edits/0": 400}
    assert start_after(None, "127.0.0.1:9092") == {}


def test_a_new_log_incarnation_is_read_from_its_beginning_and_says_so(monkeypatch):
    monkeypatch.setattr(cycle_job, "cluster_id", lambda bootstrap: "rtrl-bbb")
    said: list[str] = []
    assert start_after(_prev("rtrl-aaa"), "127.0.0.1:9092", said.append) == {}
    assert "rtrl-bbb is a new log" in said[0] and "c3" in said[0]
