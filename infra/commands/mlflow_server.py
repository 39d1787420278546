"""`rtrl mlflow-server`: the MLflow tracking and registry server over `[mlflow.server]` (infra/stack/mlflow_server.py).

    rtrl mlflow-server            foreground (a container's main process)
    rtrl mlflow-server --detach   background; `rtrl down` stops it
"""

from __future__ import annotations

import json

from infra.commands import add_command


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "mlflow-server", main,
                    "the MLflow tracking and registry server: a Postgres backend store, proxied object-store artifacts",
                    epilog="Settings in [mlflow.server]: backend_store_uri (e.g. postgresql://user@host/mlflow; the "
                           "password from PGPASSWORD), artifacts_destination (e.g. s3://bucket/mlflow; S3 credentials "
                           "from this process's AWS_* environment, and only its: clients up- and download through the "
                           "server), host, port, workers, app_name. Clients set mlflow.tracking_uri = "
                           "\"http://HOST:PORT\" and mlflow.promotion_lock.")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")


def main(args, cfg) -> int:
    from infra.stack.mlflow_server import MlflowServer

    server = MlflowServer(cfg)
    if not args.detach:
        print(f"mlflow-server: {server.url} (backend {server.backend_store_uri()}, artifacts "
              f"{server.artifacts_destination()}, proxied)", flush=True)
        server.exec()
    url = server.start()
    print(json.dumps({"mlflow_server": {"url": url, "pid": server.proc.info()["pid"], "log": str(server.proc.logfile),
                                        "artifacts_destination": server.artifacts_destination()}}))
    return 0
