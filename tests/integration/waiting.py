"""Polling for a condition in integration tests, bounded in time."""

from __future__ import annotations

import time


def wait_for(check, timeout_s: float, what: str):
    """`check()`'s first truthy value, polled every 0.5 s; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s:.0f}s")
