"""The command line of an `rtrl` subprocess, built in one place: this interpreter, `-m infra.cli`, the global options
(`--config FILE`, `--set KEY=VALUE` per override, in order), then the command and its arguments.

    subprocess.run(rtrl_argv("serve", "--detach", config=args.config, overrides=args.overrides))
"""

from __future__ import annotations

import sys
from collections.abc import Iterable


def rtrl_args(*args: str, config: str | None = None, overrides: Iterable[str] = ()) -> list[str]:
    """`rtrl`'s own arguments: `--config` when given, `--set` for each override, then `args`."""
    head = ["--config", config] if config else []
    for o in overrides:
        head += ["--set", o]
    return head + list(args)


def rtrl_argv(*args: str, config: str | None = None, overrides: Iterable[str] = ()) -> list[str]:
    """The whole command line: `[sys.executable, "-m", "infra.cli", *rtrl_args(...)]`."""
    return [sys.executable, "-m", "infra.cli", *rtrl_args(*args, config=config, overrides=overrides)]
