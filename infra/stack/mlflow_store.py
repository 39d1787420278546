"""MLflow on a local SQLite file: the tracking store and model registry of the embedded default.

The store is created at `rtrl up` (schema migrated once); the web UI is an optional process (`rtrl up --mlflow-ui`).
The artifact root is a local folder (created here) or an object-store URL (nothing to create; MLflow's S3 client
is pointed at the AWS_* endpoint by `registry.client.use_s3_endpoint_from_aws_env`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from infra.stack.config import MlflowConfig
from infra.stack.process import ManagedProcess, StackError, http_ok, port_is_free


class MlflowStore:
    def __init__(self, cfg: MlflowConfig, tracking_uri: str, artifact_root: Path | str, state_dir: Path):
        self.cfg = cfg
        self.tracking_uri = tracking_uri
        self.artifact_root = artifact_root
        self.ui = ManagedProcess("mlflow-ui", state_dir)

    @property
    def ui_url(self) -> str:
        return f"http://{self.cfg.ui_host}:{self.cfg.ui_port}"

    def ensure_store(self) -> None:
        """Create (or migrate) the SQLite tracking/registry schema; idempotent. With an MLflow server as the
        tracking URI: check that it answers (it owns its store and artifacts)."""
        if self.cfg.remote():
            from mlflow.exceptions import MlflowException
            from mlflow.tracking import MlflowClient

            try:
                MlflowClient(tracking_uri=self.tracking_uri).search_experiments(max_results=1)
            except (MlflowException, OSError) as e:
                raise StackError(f"the MLflow server {self.tracking_uri} does not answer ({str(e)[:300]}); start it "
                                 "(`rtrl mlflow-server`) or fix mlflow.tracking_uri") from None
            return
        if self.tracking_uri.startswith("sqlite:///"):
            Path(self.tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        from schemas import storage

        if storage.is_remote(self.artifact_root):
            from registry.client import use_s3_endpoint_from_aws_env

            use_s3_endpoint_from_aws_env()
        else:
            Path(self.artifact_root).mkdir(parents=True, exist_ok=True)
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri).search_experiments(max_results=1)

    def start_ui(self) -> None:
        if self.ui.is_running():
            return
        if not port_is_free(self.cfg.ui_host, self.cfg.ui_port):
            raise StackError(f"port {self.cfg.ui_port} on {self.cfg.ui_host} is taken by another process; choose "
                             "another with --set mlflow.ui_port=PORT")
        argv = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.tracking_uri,
                "--default-artifact-root", str(self.artifact_root), "--host", self.cfg.ui_host,
                "--port", str(self.cfg.ui_port), "--workers", "1"]
        self.ui.start(argv, extra={"url": self.ui_url})
        self.ui.wait_healthy(self._ui_healthy, self.cfg.startup_timeout_s, f"GET {self.ui_url}/health")

    def _ui_healthy(self) -> bool:
        return http_ok(f"{self.ui_url}/health", timeout=1)
