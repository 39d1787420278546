"""Reading a Prometheus text exposition in tests: {(sample name, sorted labels): value}, and one value by labels."""

from __future__ import annotations

from schemas.prometheus import parse_samples as samples  # noqa: F401 -- the tests' name for it


def value(scraped: dict, name: str, **labels) -> float:
    """The sample `name` with exactly these labels (0 when absent, as an unincremented counter reads)."""
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)
