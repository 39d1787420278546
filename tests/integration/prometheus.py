"""A real Prometheus (the Debian package's binary) for integration tests: started on a generated configuration,
queried through its HTTP API, stopped at the end."""

from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.conftest import free_port, stop_process
from tests.waiting import wait_for


class Prometheus:
    def __init__(self, url: str):
        self.url = url

    def get(self, path: str, **params) -> dict:
        r = httpx.get(f"{self.url}{path}", params=params, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[tuple[dict, float]]:
        """An instant query's vector: [(labels, value)]."""
        return [(s["metric"], float(s["value"][1])) for s in self.get("/api/v1/query", query=expr)["result"]]

    def value(self, expr: str) -> float | None:
        """The one value of a query that yields at most one series (None: none)."""
        out = self.query(expr)
        assert len(out) <= 1, (expr, out)
        return out[0][1] if out else None

    def targets(self) -> dict[str, str]:
        """{job: health} of the active targets."""
        return {t["labels"]["job"]: t["health"] for t in self.get("/api/v1/targets")["activeTargets"]}

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in self.get("/api/v1/alerts")["alerts"] if a["state"] == "firing"}


@contextmanager
def prometheus(config_file: Path, data_dir: Path, port: int | None = None):
    """Prometheus on 127.0.0.1:`port` with `config_file`, ready (its API answers); stopped on exit."""
    binary = shutil.which("prometheus")
    assert binary, "no prometheus binary: ./infra/setup.sh installs the Debian package `prometheus`"
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log = (data_dir / "prometheus.log").open("w")
    proc = subprocess.Popen([binary, f"--config.file={config_file}", f"--storage.tsdb.path={data_dir / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    prom = Prometheus(f"http://127.0.0.1:{port}")

    def ready() -> bool:
        assert proc.poll() is None, (data_dir / "prometheus.log").read_text()[-3000:]
        try:
            return httpx.get(f"{prom.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, 60, "Prometheus ready")
        yield prom
    finally:
        stop_process(proc)
        log.close()
