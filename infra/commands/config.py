"""`rtrl config`: show or check the effective configuration, or write the documented defaults (infra/rtrl.toml)."""

from __future__ import annotations

from infra.commands import add_command


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "config", show, "print the effective configuration (TOML → JSON)")
    p.add_argument("--check", action="store_true", help="only validate; exit 1 with the reason on error")
    p.add_argument("--write-defaults", metavar="PATH",
                   help="write every key with its default and description as TOML to PATH (what infra/rtrl.toml "
                        "holds; --config and --set do not change it)")


def show(args, cfg) -> int:
    if args.write_defaults:
        from pathlib import Path

        from infra.config_doc import render

        Path(args.write_defaults).write_text(render())
        print(f"wrote {args.write_defaults}")
    elif not args.check:
        print(cfg.model_dump_json(indent=2))
    else:
        print("config ok")
    return 0
