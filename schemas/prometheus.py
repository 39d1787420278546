"""One-sample Prometheus metric families and the text exposition, shared by every process's `/metrics`
(serving, the collector, the archiver, the cycle: docs/monitoring.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


def _by_label(family, values: Mapping[str, float], known: Iterable[str]):
    for value, n in {**dict.fromkeys(known, 0), **values}.items():
        family.add_metric([value], float(n))
    return family


def counter_by(name: str, help_: str, label: str, values: Mapping[str, float],
               known: Iterable[str] = ()) -> CounterMetricFamily:
    """A counter family with one sample per `values` key, labelled `label`; each of `known` at 0 until counted (so
    its series exists before the first one, and a rate over it is defined)."""
    return _by_label(CounterMetricFamily(name, help_, labels=[label]), values, known)


def gauge_by(name: str, help_: str, label: str, values: Mapping[str, float],
             known: Iterable[str] = ()) -> GaugeMetricFamily:
    """A gauge family with one sample per `values` key, labelled `label` (each of `known` at 0 when absent)."""
    return _by_label(GaugeMetricFamily(name, help_, labels=[label]), values, known)


def exposition(registry) -> tuple[bytes, str]:
    """The text exposition of every metric of `registry`, and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def parse_samples(text: str) -> dict[tuple[str, tuple], float]:
    """A text exposition read back: {(sample name, sorted (label, value) pairs): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}
