"""`rtrl up | status | down`."""

from __future__ import annotations

import json

from infra.commands import add_command


def add_parser(subparsers) -> None:
    up_ = add_command(subparsers, "up", up, "start the embedded stack (broker, topics, MLflow store)")
    up_.add_argument("--mlflow-ui", action="store_true", help="also serve the MLflow UI on mlflow.ui_port")
    st = add_command(subparsers, "status", status, "the deployment's health: processes, arms, the last cycle, lag, "
                     "monitors, firing alerts")
    st.description = STATUS_DESCRIPTION
    st.add_argument("--json", action="store_true", help="print it as JSON (with the stack's processes and logs)")
    add_command(subparsers, "down", down, "stop every process this state dir started")


def _stack(cfg):
    from infra.stack.stack import Stack

    return Stack(cfg)


def up(args, cfg) -> int:
    _stack(cfg).up(mlflow_ui=args.mlflow_ui)
    return 0


STATUS_DESCRIPTION = """the health of the whole deployment, from the metrics Prometheus scrapes and the registry:
each process up or down (its /metrics answers), champion and control per arm (the registry's aliases and what
serving serves), the last cycle and its steps' states and times, consumer and reward lag, the reward-hacking
monitors, the A/B checks, and the alerts firing in the Prometheus at monitoring.prometheus_url (docs/monitoring.md).

exit status: 0 printed (whatever the health)."""


def status(args, cfg) -> int:
    from infra.monitoring.status import gather, render

    st = gather(cfg, stack_status=_stack(cfg).status())
    print(json.dumps(st, indent=2, default=str) if args.json else render(st))
    return 0


def down(args, cfg) -> int:
    _stack(cfg).down()
    return 0
