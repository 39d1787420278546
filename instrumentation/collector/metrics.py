"""The collector's Prometheus metrics, exposed at its `GET /metrics` (docs/monitoring.md lists each one).

Read from its counters (`stats.Stats`) at each scrape, plus one histogram observed as ingest requests finish:

    rtrl_collector_ingest_requests_total{status}          POST /v1/events answered, by HTTP status
    rtrl_collector_ingest_duration_seconds                POST /v1/events received -> answered (histogram)
    rtrl_collector_events_accepted_total                  events Kafka acknowledged
    rtrl_collector_events_rejected_total{reason}          per-event rejections (`ingest.REJECTION_CODES`)
    rtrl_collector_kafka_produce_errors_total             batches Kafka did not acknowledge (answered 503)
    rtrl_collector_auth_failures_total                    requests answered 401
    rtrl_collector_forbidden_total                        requests answered 403
    rtrl_collector_rate_limited_total{kind}               requests answered 429: events | requests | unauthenticated
    rtrl_collector_headers_refused_total                  requests answered 431
    rtrl_collector_secrets_redacted_total                 secrets the collector's own redaction replaced
    rtrl_collector_producer_queued_batches                ingest batches waiting for the Kafka producer thread

No label carries a client, key, address or event id.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily

from instrumentation.collector.ingest import REJECTION_CODES
from schemas.prometheus import counter, counter_by, exposition, gauge

INGEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RATE_LIMIT_KINDS = ("events", "requests", "unauthenticated")


def _by_suffix(snap: dict[str, int], prefix: str, name: str, help_: str, label: str,
               known: tuple[str, ...] = ()) -> CounterMetricFamily:
    """The counters named `<prefix><x>` as one family labelled `label` = x (each of `known` at 0 until counted)."""
    return counter_by(name, help_, label, {key.removeprefix(prefix): n for key, n in snap.items()
                                           if key.startswith(prefix)}, known)


class StatsCollector:
    """The collector's `Stats` counters as Prometheus metrics (read at each scrape)."""

    def __init__(self, stats, queue_depth=None):
        self.stats, self.queue_depth = stats, queue_depth

    def collect(self):
        snap = self.stats.snapshot()
        yield _by_suffix(snap, "responses.", "rtrl_collector_ingest_requests", "POST /v1/events answered, by HTTP "
                         "status", "status")
        yield counter("rtrl_collector_events_accepted", "Events Kafka acknowledged", snap.get("events_accepted", 0))
        yield _by_suffix(snap, "rejected.", "rtrl_collector_events_rejected", "Events refused one by one, by reason",
                         "reason", REJECTION_CODES)
        yield counter("rtrl_collector_kafka_produce_errors", "Batches Kafka did not acknowledge (answered 503)",
                       snap.get("produce_errors", 0))
        yield counter("rtrl_collector_auth_failures", "Requests answered 401", snap.get("auth_failures", 0))
        yield counter("rtrl_collector_forbidden", "Requests answered 403", snap.get("forbidden", 0))
        yield _by_suffix(snap, "rate_limited.", "rtrl_collector_rate_limited", "Requests answered 429, by the limit "
                         "they hit", "kind", RATE_LIMIT_KINDS)
        yield counter("rtrl_collector_headers_refused", "Requests answered 431 (too many or too large headers)",
                       snap.get("headers_refused", 0))
        yield counter("rtrl_collector_secrets_redacted", "Secrets the collector's own redaction replaced",
                       snap.get("secrets_redacted", 0))
        if self.queue_depth is not None:
            yield gauge("rtrl_collector_producer_queued_batches", "Ingest batches waiting for the Kafka producer "
                        "thread", self.queue_depth())


class CollectorMetrics:
    def __init__(self, stats, queue_depth=None):
        self.registry = CollectorRegistry()
        self.ingest = Histogram("rtrl_collector_ingest_duration_seconds", "POST /v1/events received -> answered",
                                buckets=INGEST_BUCKETS, registry=self.registry)
        self.registry.register(StatsCollector(stats, queue_depth))

    def exposition(self) -> tuple[bytes, str]:
        return exposition(self.registry)
