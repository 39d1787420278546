"""The simulated clock (docs/simulator.md): event times in simulated time, so horizons and windows (all in event time)
behave as in production while a five-hour cycle takes minutes.

Two clocks, one interface:
    ScaledClock(start, speed)   simulated time = start + speed × wall seconds since the clock started; `wait_until`
                                sleeps until the wall moment of a simulated instant. A policy call's latency is
                                counted 1:1 (`latency`): a user sees the real latency, and a slow model on CPU does
                                not push the user's reactions out of the reward spec's windows.
    StepClock(start)            the deterministic mode: no wall clock at all. Time is whatever the simulation loop
                                says it is (`advance_to`, the next scheduled action's instant: a seeded step
                                counter), and a policy call takes a fixed simulated `latency`.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Protocol

from schemas.instants import parse_instant  # noqa: F401 -- re-exported: the simulator's start times

DETERMINISTIC_EPOCH = datetime(2026, 11, 1, tzinfo=timezone.utc)


class SimClock(Protocol):
    start: datetime
    deterministic: bool

    def now(self) -> datetime:
        """The current simulated instant (UTC)."""
        ...

    def wait_until(self, t: datetime, stop: threading.Event | None = None) -> bool:
        """Block until simulated time reaches `t` (at once if it already has). False when `stop` was set."""
        ...

    def latency(self, wall_s: float | None) -> timedelta:
        """The simulated duration of a policy call that took `wall_s` wall seconds (None: not measured)."""
        ...

    def wall(self) -> float | None:
        """A wall-clock reading to measure a call with (None in the deterministic mode, which reads none)."""
        ...


class ScaledClock:
    deterministic = False

    def __init__(self, start: datetime, speed: float, *, monotonic=time.monotonic, sleep=None):
        if start.tzinfo is None:
            raise ValueError("the simulated start needs a time zone")
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.start, self.speed = start.astimezone(timezone.utc), float(speed)
        self._monotonic = monotonic
        self._t0 = monotonic()
        self._sleep = sleep

    def now(self) -> datetime:
        return self.start + timedelta(seconds=(self._monotonic() - self._t0) * self.speed)

    def wall_seconds_until(self, t: datetime) -> float:
        return (t - self.start).total_seconds() / self.speed - (self._monotonic() - self._t0)

    def wait_until(self, t: datetime, stop: threading.Event | None = None) -> bool:
        stop = stop or threading.Event()
        while True:
            left = self.wall_seconds_until(t)
            if left <= 0:
                return not stop.is_set()
            if self._sleep is not None:
                self._sleep(left)
            elif stop.wait(min(left, 0.5)):
                return False

    def latency(self, wall_s: float | None) -> timedelta:
        return timedelta(seconds=wall_s or 0.0)

    def wall(self) -> float | None:
        return self._monotonic()


class StepClock:
    """Deterministic: time moves only when the simulation loop advances it; reads no wall clock."""

    deterministic = True

    def __init__(self, start: datetime = DETERMINISTIC_EPOCH, latency_s: float = 2.0):
        if start.tzinfo is None:
            raise ValueError("the simulated start needs a time zone")
        self.start = start.astimezone(timezone.utc)
        self._now = self.start
        self._latency = timedelta(seconds=latency_s)
        self.steps = 0

    def now(self) -> datetime:
        return self._now

    def advance_to(self, t: datetime) -> None:
        """One step of the loop: time becomes `t` (never goes back)."""
        if t > self._now:
            self._now = t
        self.steps += 1

    def wait_until(self, t: datetime, stop: threading.Event | None = None) -> bool:
        self.advance_to(t)
        return not (stop is not None and stop.is_set())

    def latency(self, wall_s: float | None) -> timedelta:
        return self._latency

    def wall(self) -> float | None:
        return None
