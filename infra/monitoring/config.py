"""`[monitoring]` in rtrl.toml: the cycle's exporter (`rtrl metrics`), the generated scrape configuration and the
Prometheus `rtrl status` asks for firing alerts."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MonitoringConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", min_length=1, description="Address the cycle's exporter (`rtrl metrics`) "
                      "listens on (0.0.0.0: every interface).")
    port: int = Field(default=18391, ge=1, le=65535, description="Port of the cycle's exporter: GET /metrics serves "
                      "the cycle, gate, A/B, monitor, champion and disk metrics read from the ledger at each scrape.")
    prometheus_url: str = Field(default="", description="The Prometheus that scrapes this deployment, e.g. "
                                "http://127.0.0.1:9090: `rtrl status` lists its firing alerts; '' = none.")
    scrape_interval_s: float = Field(default=15.0, gt=0, le=3600, description="scrape_interval and "
                                     "evaluation_interval of the configuration `rtrl metrics --scrape-config` writes.")
    status_timeout_s: float = Field(default=2.0, gt=0, le=60, description="How long `rtrl status` waits for each "
                                    "process's /metrics and for Prometheus.")
