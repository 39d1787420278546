"""`rtrl up | status | down`."""

from __future__ import annotations

import json

from infra.commands import add_command


def add_parser(subparsers) -> None:
    up_ = add_command(subparsers, "up", up, "start the embedded stack (broker, topics, MLflow store)")
    up_.add_argument("--mlflow-ui", action="store_true", help="also serve the MLflow UI on mlflow.ui_port")
    add_command(subparsers, "status", status, "show what the stack runs (JSON)")
    add_command(subparsers, "down", down, "stop every process this state dir started")


def _stack(cfg):
    from infra.stack.stack import Stack

    return Stack(cfg)


def up(args, cfg) -> int:
    _stack(cfg).up(mlflow_ui=args.mlflow_ui)
    return 0


def status(args, cfg) -> int:
    st = _stack(cfg).status()
    print(json.dumps(st, indent=2))
    return 0


def down(args, cfg) -> int:
    _stack(cfg).down()
    return 0
