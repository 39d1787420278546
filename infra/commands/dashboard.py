"""`rtrl dashboard [--port P] [--detach]`: the Streamlit dashboard (infra/dashboard/app.py) on
dashboard.host:dashboard.port (127.0.0.1 by default). It reads only the state dir and the MLflow registry."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from infra.argv import rtrl_argv
from infra.commands import add_command

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"


def streamlit_argv(host: str, port: int) -> list[str]:
    """The command that serves the app (no telemetry, no file watcher, no browser)."""
    return [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", host, "--server.port", str(port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false", "--global.developmentMode", "false",
            "--server.fileWatcherType", "none", "--client.toolbarMode", "viewer"]


def app_env(config: str | None, overrides: list[str]) -> dict[str, str]:
    """The app finds the rtrl config through these (Streamlit's own argv is not the app's)."""
    return {"RTRL_DASHBOARD_CONFIG": str(Path(config).resolve()) if config else "",
            "RTRL_DASHBOARD_SET": json.dumps(list(overrides))}


def healthy(host: str, port: int) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{host}:{port}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "dashboard", main,
                    "serve the A/B and pipeline-health dashboard (Streamlit) on dashboard.host:dashboard.port",
                    epilog="Reads only the state dir (A/B results, reward cycle manifests, data-quality and gate "
                           "reports) and the MLflow registry. Bound to 127.0.0.1 by default. Settings: [dashboard] "
                           "in rtrl.toml.")
    p.add_argument("--port", type=int, help="port (default dashboard.port)")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")


def main(args, cfg) -> int:
    from infra.stack.process import ManagedProcess, StackError, port_is_free

    host, port = cfg.dashboard.host, args.port or cfg.dashboard.port
    url = f"http://{host}:{port}"
    overrides = list(args.overrides) + ([f"dashboard.port={args.port}"] if args.port else [])
    if args.detach:
        proc = ManagedProcess("dashboard", cfg.state_path)
        if proc.is_running():
            print(f"dashboard: already running (pid {proc.info()['pid']}) at {url}; log: {proc.logfile}")
            return 0
        if not port_is_free(host, port):
            raise StackError(f"port {port} on {host} is taken; choose another with --port PORT")
        proc.start(rtrl_argv("dashboard", config=args.config, overrides=overrides), extra={"url": url})
        proc.wait_healthy(lambda: healthy(host, port), 60.0, f"GET {url}/_stcore/health")
        print(f"dashboard: {url} (pid {proc.info()['pid']}); log: {proc.logfile}; stop with `rtrl down`")
        return 0
    if not port_is_free(host, port):
        raise StackError(f"port {port} on {host} is taken; choose another with --port PORT")
    print(f"dashboard: {url} (Ctrl-C stops it)", file=sys.stderr, flush=True)
    # become the Streamlit server (exec, not a child): a signal to this pid reaches the server itself, so
    # `rtrl down` or a supervisor never leaves an orphaned server behind
    argv = streamlit_argv(host, port)
    os.execve(argv[0], argv, {**os.environ, **app_env(args.config, overrides)})
    return 0  # not reached
