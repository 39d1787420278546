"""`rtrl mlflow-server`: the MLflow tracking and registry server of the services topology (docs/gate.md).

    server = MlflowServer(cfg)
    server.argv()            # mlflow server --backend-store-uri postgresql://... --artifacts-destination s3://...
    server.start()           # a managed process (`rtrl down` stops it); waits for GET /health

Artifacts are proxied (`--serve-artifacts`): experiments the server creates get `mlflow-artifacts:/` locations, and
clients up- and download version files through the server, so only the server's environment holds the object
store's credentials (AWS_*; `MLFLOW_S3_ENDPOINT_URL` follows `AWS_ENDPOINT_URL[_S3]` as for every rtrl client).
Clients name it with `mlflow.tracking_uri = "http://HOST:PORT"` and need nothing else; promotions between them
serialise on `mlflow.promotion_lock` (a Postgres advisory lock or an object-store lease: registry/promotion.py).
"""

from __future__ import annotations

import os
import sys

from infra.stack.process import ManagedProcess, StackError, http_ok, port_is_free

NAME = "mlflow-server"


class MlflowServer:
    def __init__(self, cfg):
        self.cfg, self.server = cfg, cfg.mlflow.server
        self.proc = ManagedProcess(NAME, cfg.state_path)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.server.host in ("0.0.0.0", "::") else self.server.host
        return f"http://{host}:{self.server.port}"

    def backend_store_uri(self) -> str:
        """The store URI as SQLAlchemy needs it (`postgres.sqlalchemy_url`)."""
        from infra.stack.postgres import sqlalchemy_url

        return sqlalchemy_url(self.server.backend_store_uri or f"sqlite:///{self.cfg.state_path / 'mlflow.db'}")

    def artifacts_destination(self) -> str:
        return (self.server.artifacts_destination or self.cfg.mlflow.artifact_root
                or str(self.cfg.state_path / "mlflow-artifacts"))

    def argv(self) -> list[str]:
        s = self.server
        argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend_store_uri(),
                "--artifacts-destination", self.artifacts_destination(), "--serve-artifacts",
                "--host", s.host, "--port", str(s.port), "--workers", str(s.workers)]
        return argv + (["--app-name", s.app_name] if s.app_name else [])

    def env(self) -> dict[str, str]:
        from registry.client import use_s3_endpoint_from_aws_env

        env = dict(os.environ)
        use_s3_endpoint_from_aws_env(env)
        return env

    def healthy(self) -> bool:
        return http_ok(f"{self.url}/health")

    def start(self) -> str:
        """Start it in the background unless it runs; its URL once GET /health answers."""
        if self.proc.is_running():
            return self.url
        if not port_is_free(self.server.host, self.server.port):
            raise StackError(f"port {self.server.port} on {self.server.host} is taken; choose another with "
                             "--set mlflow.server.port=PORT")
        self.proc.start(self.argv(), env=self.env(), extra={"url": self.url})
        self.proc.wait_healthy(self.healthy, max(self.cfg.mlflow.startup_timeout_s, 120),
                               f"GET {self.url}/health")
        return self.url

    def exec(self) -> None:
        """Run it in the foreground, in place of this process (a container's main process)."""
        argv = self.argv()
        os.execve(argv[0], argv, self.env())
