"""Is Kafka reachable? A metadata request to the bootstrap servers, its result reused for `cache_s`."""

from __future__ import annotations

import threading
import time

from instrumentation.transport import kafka_reachable
from schemas.kafka_clients import KafkaTarget


class KafkaProbe:
    def __init__(self, bootstrap_servers: KafkaTarget, *, timeout_s: float = 2.0, cache_s: float = 1.0,
                 clock=time.monotonic):
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self.cache_s = cache_s
        self._clock = clock
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._ok = False

    def invalidate(self) -> None:
        """Forget the cached answer (e.g. after a failed produce) so the next call asks the broker."""
        self._checked_at = float("-inf")

    def __call__(self) -> bool:
        with self._lock:
            if self._clock() - self._checked_at >= self.cache_s:
                self._ok = self._ask()
                self._checked_at = self._clock()
            return self._ok

    def _ask(self) -> bool:
        return kafka_reachable(self.bootstrap_servers, self.timeout_s, client_id="rtrl-collector-health")
