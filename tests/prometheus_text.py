"""Reading a Prometheus text exposition in tests: {(sample name, sorted labels): value}, and one value by labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(scraped: dict, name: str, **labels) -> float:
    """The sample `name` with exactly these labels (0 when absent, as an unincremented counter reads)."""
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)
