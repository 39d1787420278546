"""Polling for a condition in tests, bounded in time: the one way tests wait for something to happen."""

from __future__ import annotations

import time


def wait_for(check, timeout_s: float, what, interval_s: float = 0.5):
    """`check()`'s first truthy value, polled every `interval_s`; AssertionError naming `what` after `timeout_s`.
    `check` is called once more at the deadline, so a condition met during the last interval is not missed.
    `what` is a string, or a function giving it when the wait fails (to say what was seen instead)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout_s)
        time.sleep(max(0.0, min(interval_s, deadline - time.monotonic())))


async def wait_for_async(check, timeout_s: float, what, interval_s: float = 0.01):
    """`wait_for` inside an event loop: polls with `asyncio.sleep`, so the loop runs what the condition waits on."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout_s)
        await asyncio.sleep(max(0.0, min(interval_s, deadline - time.monotonic())))


def _timed_out(what, timeout_s: float) -> AssertionError:
    return AssertionError(f"{what() if callable(what) else what}: not within {timeout_s:g}s")
