"""What Prometheus scrapes in a deployment: one job per long-lived process, from the configuration's own addresses.

    rtrl-serving    the gateway (serving.host:port; https when serving.tls_cert_file is set)
    rtrl-collector  the ingest collector (collector.host:port; https likewise)
    rtrl-archiver   the archiver (archive.metrics_host:metrics_port; absent when the port is 0)
    rtrl-cycle      the cycle's exporter, `rtrl metrics` (monitoring.host:port)

`scrape_config` is a whole Prometheus configuration over them, with the alert rules (infra/monitoring/alerts.yml)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RULES = Path(__file__).with_name("alerts.yml")
WILDCARDS = {"0.0.0.0", "::", "[::]", ""}


@dataclass(frozen=True)
class Target:
    job: str
    process: str          # its managed process's name (infra.stack.process.ManagedProcess)
    host: str
    port: int
    scheme: str = "http"
    ca_file: str = ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}/metrics"


def reachable(host: str) -> str:
    """The address a scraper on this machine uses for a listener bound to `host` (a wildcard: loopback)."""
    return "127.0.0.1" if host.strip() in WILDCARDS else host


def targets(cfg) -> list[Target]:
    out = []
    for job, process, section in (("rtrl-serving", "serving", cfg.serving), ("rtrl-collector", "collector",
                                                                             cfg.collector)):
        tls = bool(section.tls_cert_file)
        out.append(Target(job, process, reachable(section.host), section.port, "https" if tls else "http",
                          section.tls_cert_file if tls else ""))
    if cfg.archive.metrics_port:
        out.append(Target("rtrl-archiver", "archiver", reachable(cfg.archive.metrics_host), cfg.archive.metrics_port))
    out.append(Target("rtrl-cycle", "metrics", reachable(cfg.monitoring.host), cfg.monitoring.port))
    return out


def scrape_config(cfg, rules: Path | str | None = RULES) -> dict:
    """A Prometheus configuration (as a dict; `yaml.safe_dump` it) scraping every target, with `rules` loaded."""
    interval = f"{cfg.monitoring.scrape_interval_s:g}s"
    timeout = f"{min(cfg.monitoring.scrape_interval_s, 10.0):g}s"     # Prometheus's default, at most the interval
    jobs = []
    for t in targets(cfg):
        job = {"job_name": t.job, "scheme": t.scheme, "static_configs": [{"targets": [t.address]}]}
        if t.ca_file:
            job["tls_config"] = {"ca_file": str(Path(t.ca_file).resolve())}
        jobs.append(job)
    out = {"global": {"scrape_interval": interval, "scrape_timeout": timeout, "evaluation_interval": interval},
           "scrape_configs": jobs}
    if rules:
        out["rule_files"] = [str(Path(rules).resolve())]
    return out
