"""`rtrl demo`: the whole loop from nothing on the embedded default (infra/orchestrator/demo.py)."""

from __future__ import annotations

import sys


def main(args, cfg) -> int:
    from infra.orchestrator.demo import Demo, DemoError
    from infra.orchestrator.rtrl_cli import StepFailed
    from infra.stack.process import StackError

    if args.cycles is not None:
        cfg = cfg.model_copy(update={"demo": cfg.demo.model_copy(update={"cycles": args.cycles})})
    overrides = list(args.overrides)
    if args.cycles is not None:
        overrides.append(f"demo.cycles={args.cycles}")
    demo = Demo(cfg, args.config, overrides, log=lambda m: print(m, file=sys.stderr, flush=True),
                resume=bool(args.resume))
    try:
        if args.prepare:
            if args.resume or args.keep_running or args.summary:
                print("rtrl demo: --prepare runs no demo (no --resume, --keep-running or --summary)", file=sys.stderr)
                return 2
            demo.prepare()
        else:
            demo.run(cfg.demo.cycles, args.summary, args.keep_running, resume=args.resume)
    except (DemoError, StepFailed, StackError) as e:
        print(f"rtrl demo: {e}", file=sys.stderr)
        return 1
    return 0
