"""`rtrl orchestrator`: the Dagster UI and daemon over the cycle's definitions (infra/orchestrator/definitions.py).

    rtrl orchestrator            foreground (Ctrl-C stops); the cadence sensor starts cycles on its interval
    rtrl orchestrator --detach   background; `rtrl down` stops it

The Dagster instance lives in <state_dir>/dagster (runs, sensor ticks with their skip reasons, asset lineage).
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
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/server_info", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "orchestrator", main,
                    "the Dagster UI and daemon: the cycle's assets and lineage, the cadence sensor, replay jobs",
                    epilog="Dagster instance in <state_dir>/dagster; UI on orchestrator.dagster_host:dagster_port. "
                           "The cadence sensor starts a cycle every orchestrator.interval_s (from the last start) "
                           "when the previous one finished and orchestrator.min_mature_rows mature requests exist.")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")


def main(args, cfg) -> int:
    from infra.stack.process import ManagedProcess, StackError, port_is_free

    o = cfg.orchestrator
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
