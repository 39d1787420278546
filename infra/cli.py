"""`rtrl` command line: the global options, each command's arguments from its module in infra/commands (cheap to
import), then the config, then the command's handler, whose heavy imports load only when it runs.

Every subcommand takes the global options first: `rtrl [--config FILE] [--set key.sub=value ...] COMMAND ...`.
"""

from __future__ import annotations

import argparse
import sys

# Each command's module adds its command(s), their arguments and handlers (`add_parser`). Importing one stays cheap
# (stdlib at module level; torch, vllm, beam, dagster load inside the handlers): tests/unit/infra/test_cli.py checks.
from infra.commands import (ab, archive, bench, bootstrap, chaos, collector, config, cycle, dashboard, demo, gate,
                            metrics, mlflow_server, offline_ab, orchestrator, promote, quality, replay, retention,
                            rewards, schemas, serve, simulate, stack, train)

EPILOG = """examples:
  rtrl up                      start the embedded broker (+ topics) and the MLflow store
  rtrl status                  the deployment's health: processes, arms, the last cycle, lag, monitors, alerts
  rtrl metrics --detach        the cycle's Prometheus exporter (`--scrape-config FILE`: Prometheus's configuration)
  rtrl collector --keys-new web   make an API key for client 'web', then `rtrl collector` serves ingest
  rtrl archive                 archive telemetry to Parquet (Ctrl-C stops it cleanly)
  rtrl replay --start 2026-11-01T00:00Z --end 2026-11-02T00:00Z --out /tmp/rewards
                               recompute the reward table from the archived event log
  rtrl rewards --cycle c1      a cycle's reward rows from Kafka (range since the last cycle)
  rtrl quality --rewards .rtrl/rewards/table   data-quality suites (exit 3 blocks training)
  rtrl bootstrap               make and register policy v0 (aliases champion, control)
  rtrl bench ingest --json     SDK, collector and Kafka throughput, end-to-end delivery check
  rtrl bench emit --json       SDK emit cost on the caller's thread, without and with the write-ahead log
  rtrl serve --detach          the OpenAI-compatible gateway (A/B arms, hot swap) in the background
  rtrl gate 3                  evaluate version 3 against the champion (held-out suite, report, MLflow)
  rtrl promote 3               make version 3 champion if its gate passed against the current champion
  rtrl cycle                   one cycle in this process (the next, or the unfinished one), all its steps
  rtrl demo --cycles 3 --summary out.json   the whole loop from nothing, 3 cycles, A/B summary
  rtrl orchestrator            Dagster UI + daemon: cycles every 5 hours, replay jobs
  rtrl chaos --faults 20 --json   kill and restart the loop's parts; every served request rewarded exactly once?
  rtrl rollback                champion back to the version it replaced
  rtrl retention --dry-run     which versions keep their checkpoint files and why (without: delete the rest)
  rtrl ab report --cycle c3 --format md   a cycle's A/B table (also html, json)
  rtrl dashboard               the Streamlit dashboard on http://127.0.0.1:18501
  rtrl down                    stop everything this state dir started
"""

# in the order `rtrl --help` lists their commands
COMMANDS = (stack, config, schemas, collector, archive, serve, quality, rewards, train, replay, simulate, offline_ab,
            bootstrap, gate, promote, retention, cycle, ab, dashboard, metrics, demo, orchestrator, mlflow_server,
            chaos, bench)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rtrl", description="Real-time RL for coding-assistant models.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="TOML config (default: infra/rtrl.toml, the embedded default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set kafka.port=29092 (repeatable)")
    # the `deepspeed` launcher puts --local_rank=N before the command; the rank is read from the environment
    p.add_argument("--local_rank", type=int, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


_parser = build_parser  # the name older callers use


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from infra.config import ConfigError, load_config

    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"rtrl: config error: {e}", file=sys.stderr)
        return 2
    from infra.stack.process import StackError

    try:
        return int(args.handler(args, cfg) or 0)
    except StackError as e:
        print(f"rtrl: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if not _kafka_unreachable(e):
            raise
        from schemas.kafka_clients import explain_unreachable

        print(f"rtrl: {explain_unreachable(cfg.kafka, e)}", file=sys.stderr)   # says why when TLS was refused
        return 1


def _kafka_unreachable(e: BaseException) -> bool:
    """kafka-python's error for a cluster it could not bootstrap from, which a refused TLS handshake also raises."""
    errors = sys.modules.get("kafka.errors")
    return errors is not None and isinstance(e, errors.KafkaTimeoutError) and "bootstrap" in str(e).lower()


if __name__ == "__main__":
    sys.exit(main())
