"""`rtrl metrics [--detach]`: the cycle's Prometheus exporter. `rtrl metrics --scrape-config FILE`: write the
Prometheus configuration that scrapes this deployment (docs/monitoring.md)."""

from __future__ import annotations

import json
import sys

from infra.argv import rtrl_argv
from infra.commands import add_command

DESCRIPTION = """serve the cycle's Prometheus metrics on monitoring.host:monitoring.port (GET /metrics): the latest
cycle, its steps' states and times, reward rows, gate decisions, the A/B rates, the reward-hacking monitors per arm,
the champion per arm, the state dir's disk and the checkpoint cache, read from the ledger at every scrape
(docs/monitoring.md lists them). Runs until stopped (Ctrl-C); `--detach` runs it in the background (stopped by
`rtrl down`). With --scrape-config it only writes a Prometheus configuration scraping serving, the collector, the
archiver and this exporter, with the alert rules (infra/monitoring/alerts.yml), and exits."""


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "metrics", main, "serve the cycle's Prometheus metrics (or write a scrape config)")
    p.description = DESCRIPTION
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")
    p.add_argument("--scrape-config", metavar="FILE", help="write the Prometheus configuration of this deployment "
                   "to FILE ('-': stdout) and exit")
    p.add_argument("--no-rules", action="store_true", help="with --scrape-config: leave the alert rules out")


def _url(cfg) -> str:
    from infra.monitoring.targets import reachable

    return f"http://{reachable(cfg.monitoring.host)}:{cfg.monitoring.port}/metrics"


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _detach(args, cfg) -> int:
    from infra.stack.process import ManagedProcess, StackError, port_is_free

    proc = ManagedProcess("metrics", cfg.state_path)
    url = _url(cfg)
    if (rec := proc.info()) is not None:
        print(json.dumps({"metrics": "already running", "pid": rec["pid"], "url": url, "log": str(proc.logfile)}))
        return 0
    if not port_is_free(cfg.monitoring.host, cfg.monitoring.port):
        raise StackError(f"port {cfg.monitoring.port} on {cfg.monitoring.host} is taken; choose another with "
                         "--set monitoring.port=PORT")
    rec = proc.start(rtrl_argv("metrics", config=args.config, overrides=args.overrides), extra={"url": url})
    proc.wait_healthy(lambda: _answers(url), 30.0, f"GET {url}")
    print(json.dumps({"metrics": "started", "pid": rec["pid"], "url": url, "log": str(proc.logfile)}))
    return 0


def _write_scrape_config(args, cfg) -> int:
    import yaml

    from infra.monitoring.targets import RULES, scrape_config

    text = yaml.safe_dump(scrape_config(cfg, rules=None if args.no_rules else RULES), sort_keys=False)
    if args.scrape_config == "-":
        sys.stdout.write(text)
    else:
        with open(args.scrape_config, "w") as f:
            f.write(text)
        print(f"metrics: wrote the Prometheus configuration to {args.scrape_config} (prometheus "
              f"--config.file={args.scrape_config})", file=sys.stderr)
    return 0


def main(args, cfg) -> int:
    if args.scrape_config:
        return _write_scrape_config(args, cfg)
    if args.detach:
        return _detach(args, cfg)
    import threading

    from infra.monitoring.exporter import serve

    try:
        serve(cfg)
    except OSError as e:
        print(f"rtrl metrics: cannot listen on {cfg.monitoring.host}:{cfg.monitoring.port}: {e} (set "
              "monitoring.port)", file=sys.stderr)
        return 1
    print(f"metrics: the cycle's metrics at {_url(cfg)}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0
