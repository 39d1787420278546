"""Token buckets: `rate` units/s sustained, `burst` at once, one bucket per key.

The collector keeps three: events per authenticated client, requests per authenticated client (an empty batch is
still a request), and unauthenticated requests per remote address (failed credentials, /healthz, /openapi.json).
The address table is bounded (`max_keys`, least recently used dropped first), so many addresses cannot grow it
without limit; a dropped address starts again with a full bucket.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict


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
    """One bucket per key (a client id, or a remote address); at most `max_keys` buckets (LRU)."""

    def __init__(self, rate: float, burst: int, *, clock=time.monotonic, max_keys: int | None = None):
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def _bucket(self, key: str, now: float) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, now)
            if self.max_keys is not None and len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket

    def acquire(self, key: str, n: int) -> float:
        """0.0 when `key` may spend `n` units now (they are taken); otherwise the seconds to wait (Retry-After)."""
        with self._lock:
            now = self._clock()
            return self._bucket(key, now).take(n, now)

    def wait_for(self, key: str, n: int = 1) -> float:
        """Like `acquire` but takes nothing: 0.0 if `n` units are available now."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                return 0.0
            now = self._clock()
            bucket._fill(now)
            return 0.0 if n <= bucket.tokens else (math.inf if n > bucket.burst else (n - bucket.tokens) / self.rate)

    def refund(self, client: str, n: int) -> None:
        """Return tokens for events that were not delivered (the client will retry them)."""
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is not None:
                bucket.give_back(n)
