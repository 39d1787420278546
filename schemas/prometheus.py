"""One-sample Prometheus metric families and the text exposition, shared by every process's `/metrics`
(serving, the collector, the archiver, the cycle: docs/monitoring.md)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


def counter(name: str, help_: str, value: float) -> CounterMetricFamily:
    """A counter family with one unlabelled sample (`name` without `_total`: the family adds it)."""
    c = CounterMetricFamily(name, help_)
    c.add_metric([], float(value))
    return c


def gauge(name: str, help_: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    """A gauge family with one sample, labelled by `labels`."""
    labels = labels or {}
    g = GaugeMetricFamily(name, help_, labels=list(labels))
    g.add_metric(list(labels.values()), float(value))
    return g


def exposition(registry) -> tuple[bytes, str]:
    """The text exposition of every metric of `registry`, and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def parse_samples(text: str) -> dict[tuple[str, tuple], float]:
    """A text exposition read back: {(sample name, sorted (label, value) pairs): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}
