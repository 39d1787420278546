"""`rtrl up | status | down`."""

from __future__ import annotations

import json


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
