"""`rtrl orchestrator`: the Dagster UI and daemon over the cycle's definitions (infra/orchestrator/definitions.py).

    rtrl orchestrator            foreground (Ctrl-C stops); the cadence sensor starts cycles on its interval
    rtrl orchestrator --detach   background; `rtrl down` stops it

The embedded default: `dagster dev` over a local instance in <state_dir>/dagster (runs, sensor ticks with their
skip reasons, asset lineage). As a service (`orchestrator.postgres_url` set): `dagster-webserver` and
`dagster-daemon run` as two processes over the Postgres instance of infra/orchestrator/instance.py
(`--only webserver|daemon` runs one of them, e.g. one per pod).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from infra.commands import add_command

NAME = "orchestrator"


def _argv_env(args, cfg) -> tuple[list[str], dict[str, str]]:
    o = cfg.orchestrator
    from infra.orchestrator.instance import dagster_home

    home = dagster_home(cfg.state_path)
    dagster = Path(sys.executable).with_name("dagster")
    argv = [str(dagster), "dev", "-m", "infra.orchestrator.definitions", "-h", o.dagster_host,
            "-p", str(o.dagster_port)]
    env = {"DAGSTER_HOME": str(home), "RTRL_CONFIG": args.config or "", "RTRL_SET": json.dumps(args.overrides)}
    return argv, env


def _answers(url: str) -> bool:
    from infra.stack.process import http_ok

    return http_ok(f"{url}/server_info")


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "orchestrator", main,
                    "the Dagster UI and daemon: the cycle's assets and lineage, the cadence sensor, replay jobs",
                    epilog="Dagster instance in <state_dir>/dagster; UI on orchestrator.dagster_host:dagster_port. "
                           "The cadence sensor starts a cycle every orchestrator.interval_s (from the last start) "
                           "when the previous one finished and orchestrator.min_mature_rows mature requests exist. "
                           "With orchestrator.postgres_url set, the service form: dagster-webserver and dagster-daemon "
                           "over Postgres storage (<state_dir>/dagster-service has their dagster.yaml and "
                           "workspace.yaml).")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")
    p.add_argument("--only", choices=("webserver", "daemon"), help="the service form: run only the webserver or "
                   "only the daemon (one per container); both by default")


SERVICE = {"webserver": "orchestrator-webserver", "daemon": "orchestrator-daemon"}


def _service_argv(cfg, part: str, home: Path) -> list[str]:
    o = cfg.orchestrator
    workspace = str(home / "workspace.yaml")
    if part == "webserver":
        return [str(Path(sys.executable).with_name("dagster-webserver")), "-h", o.dagster_host,
                "-p", str(o.dagster_port), "-w", workspace]
    return [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", workspace]


def service(args, cfg) -> int:
    """The service form: the webserver and the daemon over the Postgres instance."""
    from infra.orchestrator.instance import service_env
    from infra.stack.process import ManagedProcess, StackError, port_is_free, stop_together

    o = cfg.orchestrator
    url = f"http://{o.dagster_host}:{o.dagster_port}"
    env = service_env(cfg, args.config, args.overrides)
    home = Path(env["DAGSTER_HOME"])
    parts = [args.only] if args.only else ["webserver", "daemon"]
    if not args.detach and len(parts) == 1:     # a container's main process
        argv = _service_argv(cfg, parts[0], home)
        print(f"orchestrator: {parts[0]} over {o.postgres_url} (instance {home})", flush=True)
        os.execve(argv[0], argv, {**os.environ, **env})
    procs = {part: ManagedProcess(SERVICE[part], cfg.state_path) for part in parts}
    if "webserver" in parts and not procs["webserver"].is_running() and not port_is_free(o.dagster_host,
                                                                                         o.dagster_port):
        raise StackError(f"port {o.dagster_port} on {o.dagster_host} is taken; choose another with "
                         "--set orchestrator.dagster_port=PORT")
    t0 = time.monotonic()
    for part, proc in procs.items():
        proc.start(_service_argv(cfg, part, home), env=env, extra={"url": url} if part == "webserver" else None)
    if "webserver" in procs:
        procs["webserver"].wait_healthy(lambda: _answers(url), 180, f"GET {url}/server_info")
    if "daemon" in procs:
        procs["daemon"].wait_healthy(lambda: _daemon_heartbeats(cfg), 180, "the daemon's first heartbeat")
    out = {part: {"pid": p.info()["pid"], "log": str(p.logfile)} for part, p in procs.items()}
    print(json.dumps({"orchestrator": {"url": url if "webserver" in procs else None, "service": True,
                                       "dagster_home": str(home), **out,
                                       "seconds": round(time.monotonic() - t0, 1)}}), flush=True)
    if args.detach:
        return 0
    try:           # foreground with both: until Ctrl-C or one of them stops
        while all(p.is_running() for p in procs.values()):
            time.sleep(1.0)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop_together(list(procs.values()), 30.0)


def _daemon_heartbeats(cfg) -> bool:
    """Whether the service's daemon has written a heartbeat to its storage (its sensor daemon is up)."""
    from infra.orchestrator.instance import service_instance

    try:
        with service_instance(cfg) as instance:
            return bool(instance.get_daemon_heartbeats())
    except Exception:  # noqa: BLE001 -- the storage's tables are made by the first process that opens it
        return False


def main(args, cfg) -> int:
    from infra.stack.process import ManagedProcess, StackError, port_is_free

    o = cfg.orchestrator
    if o.service():
        return service(args, cfg)
    if args.only:
        raise SystemExit("rtrl orchestrator: --only needs the service form (set orchestrator.postgres_url)")
    url = f"http://{o.dagster_host}:{o.dagster_port}"
    proc = ManagedProcess(NAME, cfg.state_path)
    if (rec := proc.info()) is not None:
        print(f"orchestrator: already running (pid {rec['pid']}) at {url}; log: {proc.logfile}")
        return 0
    if not port_is_free(o.dagster_host, o.dagster_port):
        raise StackError(f"port {o.dagster_port} on {o.dagster_host} is taken; choose another with "
                         "--set orchestrator.dagster_port=PORT")
    argv, env = _argv_env(args, cfg)
    if not args.detach:
        print(f"orchestrator: Dagster UI at {url} (instance {env['DAGSTER_HOME']}); Ctrl-C stops", flush=True)
        os.execve(argv[0], argv, {**os.environ, **env})
    proc.start(argv, env=env, extra={"url": url})
    t0 = time.monotonic()
    proc.wait_healthy(lambda: _answers(url), 180, f"GET {url}/server_info")
    print(json.dumps({"orchestrator": {"url": url, "pid": proc.info()["pid"], "log": str(proc.logfile),
                                       "dagster_home": env["DAGSTER_HOME"], "seconds": round(time.monotonic() - t0, 1)}}))
    return 0
