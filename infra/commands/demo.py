"""`rtrl demo`: the whole loop from nothing on the embedded default (infra/orchestrator/demo.py)."""

from __future__ import annotations

import sys

from infra.commands import add_command


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "demo", main,
                    "the whole loop from nothing: stack, v0, serving with control/treatment arms, simulated users, K "
                    "cycles under the orchestrator on an accelerated clock; prints a table per cycle and the A/B "
                    "result",
                    epilog="Works in <state_dir>/demo (made fresh unless --resume). What every demo reuses is made "
                           "once and kept outside it: v0 in <state_dir>/policy-v0 (bootstrapped, a few minutes), "
                           "the gate's held-out suite in <state_dir>/eval-suites with v0's gate episodes; "
                           "`--prepare` (run by ./infra/setup.sh) makes them without a demo, else the first demo "
                           "does. Progress on stderr, the table on stdout. Settings: [demo] in rtrl.toml (users, "
                           "speed, cycles, time budget) and the overlay infra/configs/demo.toml (cadence, "
                           "training, gate size), under your own --config and --set.")
    p.add_argument("--cycles", type=int, metavar="K", help="cycles to run (default demo.cycles: 3; 1 with "
                   "--specialize)")
    p.add_argument("--summary", metavar="PATH", help="also write the summary as JSON to PATH")
    p.add_argument("--keep-running", action="store_true", help="leave the stack, serving, users and the UIs "
                   "(MLflow, Dagster, dashboard) running at the end; `rtrl --set state_dir=... down` stops them")
    p.add_argument("--resume", action="store_true", help="keep the demo state dir of an earlier run")
    p.add_argument("--specialize", action="store_true", help="the loop with specialization and long loops on "
                   "(infra/configs/specialize.toml over the demo's overlay): a third arm served by each org's "
                   "specialized adapter, trained, gated and promoted every cycle, and background tasks judged hours "
                   "later; the summary adds ab_by_org, ab_by_org_pooled and long_loop (about 20 minutes)")
    p.add_argument("--prepare", action="store_true", help="only make what every demo reuses (v0, the gate's "
                   "suite, v0's gate episodes) when missing, then stop: so that the first demo takes as long as "
                   "the next ones")


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
                resume=bool(args.resume), specialize=bool(args.specialize))
    try:
        if args.prepare:
            if args.resume or args.keep_running or args.summary:
                print("rtrl demo: --prepare runs no demo (no --resume, --keep-running or --summary)", file=sys.stderr)
                return 2
            demo.prepare()
        else:
            demo.run(demo.cfg.demo.cycles, args.summary, args.keep_running, resume=args.resume)
    except (DemoError, StepFailed, StackError) as e:
        print(f"rtrl demo: {e}", file=sys.stderr)
        return 1
    return 0
