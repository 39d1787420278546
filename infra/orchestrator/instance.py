"""The Dagster instance: local for the embedded default, over Postgres as a service (docs/orchestrator.md).

    dagster_home(state_path)     <state_dir>/dagster: SQLite storage (runs, sensor ticks, lineage); `dagster dev`
    service_home(cfg)            <state_dir>/dagster-service: dagster.yaml with Postgres run, event-log and schedule
                                 storage, the queued run coordinator, run monitoring; workspace.yaml loading rtrl's
                                 code location. Written anew at every start (the configuration decides it).
    service_env(cfg, config_path, overrides)   the environment the webserver, daemon and code server run with

No secret is written to disk: dagster.yaml names the environment variable (`RTRL_DAGSTER_PG_URL`) that holds the
database URL, which itself carries no password (libpq reads PGPASSWORD or ~/.pgpass).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

SETTINGS = "telemetry:\n  enabled: false\n"   # nothing leaves the machine (and no welcome banner on stdout)
PG_URL_ENV = "RTRL_DAGSTER_PG_URL"
LOCATION = "rtrl"
SENSOR_TIMEOUT_S = 600
REPO = Path(__file__).resolve().parents[2]


def dagster_home(state_path: Path) -> Path:
    """The instance folder, made with its dagster.yaml on first use (a user's own dagster.yaml is kept)."""
    home = Path(state_path) / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    settings = home / "dagster.yaml"
    if not settings.exists() or not settings.read_text().strip():
        settings.write_text(SETTINGS)
    return home


def service_settings(cfg) -> dict:
    """dagster.yaml of the service instance: Postgres storage (its URL from PG_URL_ENV), runs queued and launched
    in their own processes (one run worker per run, one process per step: the multiprocess executor), run
    monitoring for runs that never start, telemetry off."""
    o = cfg.orchestrator
    return {
        "telemetry": {"enabled": False},
        "storage": {"postgres": {"postgres_url": {"env": PG_URL_ENV}}},
        "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator",
                            "config": {"max_concurrent_runs": 4,
                                       "tag_concurrency_limits": [{"key": "dagster/partition_set", "limit": 1}]}},
        "run_launcher": {"module": "dagster._core.launcher", "class": "DefaultRunLauncher"},
        "run_monitoring": {"enabled": True, "start_timeout_seconds": 600, "poll_interval_seconds": 30,
                           "max_runtime_seconds": int(o.step_timeout_s * 10)},
    }


def workspace_settings(module: str = "infra.orchestrator.definitions") -> dict:
    """workspace.yaml: rtrl's code location, loaded from the installed project (its source folder as the working
    directory); the webserver and the daemon each start its code server."""
    return {"load_from": [{"python_module": {"module_name": module, "working_directory": str(REPO),
                                             "location_name": LOCATION}}]}


def service_dir(cfg) -> Path:
    """`<state_dir>/dagster-service`, the service instance's DAGSTER_HOME (its files: `service_home`)."""
    if not cfg.orchestrator.service():
        raise ValueError("orchestrator.postgres_url is not set: the local instance is dagster_home()")
    return Path(cfg.state_path) / "dagster-service"


def service_home(cfg) -> Path:
    """`<state_dir>/dagster-service` with its dagster.yaml and workspace.yaml, written from the configuration."""
    import yaml

    home = service_dir(cfg)
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(yaml.safe_dump(service_settings(cfg), sort_keys=False))
    (home / "workspace.yaml").write_text(yaml.safe_dump(workspace_settings(), sort_keys=False))
    return home


def service_env(cfg, config_path: str | None, overrides: list[str]) -> dict[str, str]:
    from infra.stack.postgres import sqlalchemy_url

    home = service_home(cfg)
    # the cadence sensor counts the mature requests since the last cycle in Kafka: more than Dagster's 60 s default
    # for a sensor tick when a cycle's traffic is large
    return {"DAGSTER_HOME": str(home), PG_URL_ENV: sqlalchemy_url(cfg.orchestrator.postgres_url),
            "RTRL_CONFIG": config_path or "", "RTRL_SET": json.dumps(list(overrides)),
            "DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS": str(SENSOR_TIMEOUT_S)}


@contextmanager
def service_instance(cfg):
    """The service's DagsterInstance in this process (reads its Postgres storage), for tools, the start-up check of
    `rtrl orchestrator` and tests."""
    import os

    import dagster as dg

    from infra.stack.postgres import sqlalchemy_url

    # the files `rtrl orchestrator` wrote (not rewritten here: a webserver or daemon may be reading them)
    home = service_dir(cfg) if (service_dir(cfg) / "dagster.yaml").is_file() else service_home(cfg)
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", PG_URL_ENV)}
    os.environ["DAGSTER_HOME"], os.environ[PG_URL_ENV] = str(home), sqlalchemy_url(cfg.orchestrator.postgres_url)
    try:
        with dg.DagsterInstance.get() as instance:
            yield instance
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
