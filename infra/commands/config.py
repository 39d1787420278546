"""`rtrl config`: show or check the effective configuration."""

from __future__ import annotations


def show(args, cfg) -> int:
    if not args.check:
        print(cfg.model_dump_json(indent=2))
    else:
        print("config ok")
    return 0
