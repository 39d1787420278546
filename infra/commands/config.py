"""`rtrl config`: show or check the effective configuration."""

from __future__ import annotations

from infra.commands import add_command


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "config", show, "print the effective configuration (TOML → JSON)")
    p.add_argument("--check", action="store_true", help="only validate; exit 1 with the reason on error")


def show(args, cfg) -> int:
    if not args.check:
        print(cfg.model_dump_json(indent=2))
    else:
        print("config ok")
    return 0
