"""The collector's counters since start (served to admin keys at GET /v1/stats, and logged at shutdown)."""

from __future__ import annotations

import threading
from collections import Counter


class Stats:
    """Thread-safe named counters. Names in use:

    requests                 ingest requests that passed authentication
    events_accepted          events acknowledged by Kafka
    rejected.<code>          per-event rejections (`ingest.REJECTION_CODES`: schema, org_mismatch, role_forbidden,
                             event_time_future, event_time_past)
    secrets_redacted         secrets the collector's own redaction replaced (a client without the SDK, or an old SDK)
    events_redacted          events in which it replaced at least one
    auth_failures            requests answered 401
    forbidden                requests answered 403 (key without org, admin endpoint without the admin role)
    rate_limited.<kind>      requests answered 429: events, requests (per client), unauthenticated (per address)
    headers_refused          requests answered 431 (too many or too large headers)
    responses.<status>       POST /v1/events answered with that HTTP status
    produce_errors           batches Kafka did not acknowledge (answered 503)
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: Counter = Counter()

    def add(self, name: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[name] += n

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))
