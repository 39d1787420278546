"""The cycle's exporter: `GET /metrics` over the ledger (infra/orchestrator/metrics.py `CycleCollector`), read at each
scrape, so it holds no state of its own and may be restarted at any time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server

from infra.orchestrator.metrics import CycleCollector


def registry_for(cfg) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(CycleCollector.for_config(cfg))
    return registry


def serve(cfg, host: str | None = None, port: int | None = None):
    """Serve the cycle's metrics on host:port (default monitoring.host/port) in a daemon thread: (server, thread)."""
    return start_http_server(cfg.monitoring.port if port is None else port,
                             addr=cfg.monitoring.host if host is None else host, registry=registry_for(cfg))
