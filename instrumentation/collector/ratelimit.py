"""Per-client token buckets on events: `rate` events/s sustained, `burst` at once."""

from __future__ import annotations

import math
import threading
import time


class TokenBucket:
    def __init__(self, rate: float, burst: int, now: float):
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.updated = now

    def _fill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, n: int, now: float) -> float:
        """Take `n` tokens: 0.0 if granted, else the seconds until `n` will be available (nothing is taken)."""
        self._fill(now)
        if n <= self.tokens:
            self.tokens -= n
            return 0.0
        if n > self.burst:
            return math.inf
        return (n - self.tokens) / self.rate

    def give_back(self, n: int) -> None:
        self.tokens = min(self.burst, self.tokens + n)


class RateLimiter:
    """One bucket per authenticated client (clients are the keys file's entries, so the map stays small)."""

    def __init__(self, rate: float, burst: int, *, clock=time.monotonic):
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def acquire(self, client: str, n: int) -> float:
        """0.0 when `client` may send `n` events now; otherwise the seconds to wait (Retry-After)."""
        with self._lock:
            now = self._clock()
            bucket = self._buckets.get(client)
            if bucket is None:
                bucket = self._buckets[client] = TokenBucket(self.rate, self.burst, now)
            return bucket.take(n, now)

    def refund(self, client: str, n: int) -> None:
        """Return tokens for events that were not delivered (the client will retry them)."""
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is not None:
                bucket.give_back(n)
