"""The simulated clock: scaled wall time, or deterministic steps that read no wall clock."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from instrumentation.simulator.clock import DETERMINISTIC_EPOCH, ScaledClock, StepClock, parse_instant
from instrumentation.simulator.config import SimulatorConfig
from instrumentation.simulator.population import run_key, start_instant

T0 = datetime(2026, 11, 1, 8, tzinfo=timezone.utc)


class FakeWall:
    def __init__(self):
        self.t = 100.0
        self.slept = []

    def monotonic(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s


def test_scaled_clock_runs_speed_times_faster_than_the_wall():
    wall = FakeWall()
    clock = ScaledClock(T0, 600, monotonic=wall.monotonic, sleep=wall.sleep)
    assert clock.now() == T0
    wall.t += 30  # a five-hour cycle in 30 s
    assert clock.now() == T0 + timedelta(hours=5)
    assert clock.wait_until(T0 + timedelta(hours=6))
    assert wall.slept == [pytest.approx(6.0)] and clock.now() == T0 + timedelta(hours=6)
    assert clock.wait_until(T0) and len(wall.slept) == 1  # the past: at once
    assert clock.latency(0.25) == timedelta(seconds=0.25)  # a call's latency counts 1:1


def test_scaled_clock_wait_stops_when_told():
    clock = ScaledClock(T0, 1.0)
    stop = threading.Event()
    stop.set()
    assert clock.wait_until(T0 + timedelta(hours=1), stop) is False


def test_step_clock_moves_only_when_advanced_and_never_back():
    clock = StepClock(latency_s=3)
    assert clock.start == DETERMINISTIC_EPOCH and clock.now() == clock.start and clock.wall() is None
    clock.advance_to(clock.start + timedelta(minutes=5))
    clock.advance_to(clock.start + timedelta(minutes=1))
    assert clock.now() == clock.start + timedelta(minutes=5) and clock.steps == 2
    assert clock.latency(None) == timedelta(seconds=3)
    with pytest.raises(ValueError, match="time zone"):
        StepClock(datetime(2026, 1, 1))


def test_the_default_start_ends_the_run_by_the_present_and_a_configured_one_is_used():
    now = datetime(2026, 11, 22, 12, tzinfo=timezone.utc)
    cfg = SimulatorConfig(speed=600)
    start = start_instant(cfg, 30, now=now)
    assert start + timedelta(seconds=30 * 600 + cfg.cleanup_delay_s) <= now
    assert start_instant(SimulatorConfig(start_time="2026-11-01T00:00Z"), 30) == parse_instant("2026-11-01T00:00:00Z")
    assert run_key(0, start) != run_key(0, start + timedelta(seconds=1)) != run_key(1, start)


@pytest.mark.parametrize("bad, message", [
    ({"start_time": "yesterday"}, "not an ISO 8601 time"),
    ({"start_time": "2026-11-01T00:00"}, "needs a time zone"),
    ({"think_s": (10, 5)}, "min <= max"),
    ({"snapshot_delay_s": 600}, "after the latest revert"),
    ({"speed": 0}, "greater than 0"),
])
def test_bad_simulator_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        SimulatorConfig(**bad)
