"""`rtrl cycle [ID]`: one cycle by the in-process executor (infra.orchestrator.steps.run_cycle): the same step
functions the Dagster job runs, one after another in this process, recorded in the same ledger.

    rtrl cycle            the next cycle (c1, c2, ...), or the one a crash left unfinished
    rtrl cycle c3         cycle c3: a new one, or resumed where it stopped (its done steps are not run again)
    rtrl cycle c3 --retry     a stuck cycle (orchestrator.max_failures failures in a row): cleared, and run here
    rtrl cycle c3 --unstick   cleared only: the cadence sensor retries it at its next tick

Prints each step's progress on stderr and the cycle's ledger record as one JSON object on stdout. Exit codes: 0 the
cycle is done (or cleared, with --unstick); 3 it is blocked (a data-quality suite failed, too few usable rows); 1 a
step failed (run the same cycle again to resume); 4 it is stuck (run it with --retry, or --unstick it); 2 bad
arguments (an invalid cycle id, a cycle still running elsewhere, --unstick of a cycle that is not stuck or failed).
"""

from __future__ import annotations

import json
import sys

from infra.commands import add_command

EXIT_DONE, EXIT_FAILED, EXIT_USAGE, EXIT_BLOCKED, EXIT_STUCK = 0, 1, 2, 3, 4


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "cycle", main, "run one cycle in this process: collect, distill, validate, measure, "
                    "train, evaluate, promote, specialize, deploy (the Dagster job's steps)",
                    epilog="A crashed or failed cycle resumes where it stopped when run again with its id; a done or "
                           "blocked one is not run again; a stuck one (orchestrator.max_failures failures in a row) "
                           "only with --retry. Exit 0 done, 3 blocked, 1 a step failed, 4 stuck, 2 bad arguments.")
    p.add_argument("cycle", nargs="?", metavar="ID", help="cycle id (default: the unfinished cycle, else the next)")
    clear = p.add_mutually_exclusive_group()
    clear.add_argument("--retry", action="store_true", help="clear a stuck or failed cycle's failures in a row and "
                       "run it here now")
    clear.add_argument("--unstick", action="store_true", help="clear a stuck or failed cycle's failures in a row "
                       "and exit: the cadence sensor retries it at its next tick")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(args, cfg) -> int:
    from dataclasses import asdict

    from infra.config import load_config
    from infra.orchestrator.cadence import pid_alive
    from infra.orchestrator.clock import clock_for
    from infra.orchestrator.errors import StepFailed
    from infra.orchestrator.ledger import BLOCKED, FAILED, RUNNING, STUCK, Ledger
    from infra.orchestrator.steps import CycleBlocked, CycleStuck, context_for, run_cycle

    ledger = Ledger.for_config(cfg)
    cycle_id = args.cycle
    if cycle_id is None:
        last = ledger.latest()
        cycle_id = last.cycle_id if last is not None and last.status in (RUNNING, FAILED, STUCK) else \
            ledger.next_id()
    try:
        old = ledger.load(cycle_id)
    except ValueError as e:
        print(f"rtrl cycle: {e}", file=sys.stderr)
        return EXIT_USAGE
    if old is not None and old.status == RUNNING and not old.dagster_run_id and pid_alive(old):
        print(f"rtrl cycle: cycle {cycle_id} is running in process {old.runner_pid}", file=sys.stderr)
        return EXIT_USAGE
    if args.retry or args.unstick:
        try:
            old = ledger.unstick(cycle_id)
        except ValueError as e:
            print(f"rtrl cycle: {e}", file=sys.stderr)
            return EXIT_USAGE
        _log(f"rtrl cycle: cycle {cycle_id}'s failures in a row cleared ({old.failures_total} in all); "
             + ("running it" if args.retry else "the cadence retries it at its next tick"))
        if args.unstick:
            print(json.dumps({"cycle": asdict(old)}, default=str))
            return EXIT_DONE
    ctx, ledger = context_for(cfg, cycle_id, clock_for(cfg).now(), log=_log, ledger=ledger,
                              config_path=args.config, overrides=args.overrides)
    if ctx.record.settings:       # a resumed cycle runs with the settings it started with
        ctx.overrides = [*args.overrides, *ctx.record.settings]
        ctx.cfg = load_config(args.config, ctx.overrides)
    code = EXIT_DONE
    try:
        rec = run_cycle(ctx, ledger)
    except CycleBlocked:
        code = EXIT_BLOCKED
    except CycleStuck as e:
        _log(f"rtrl cycle: {e}")
        code = EXIT_STUCK
    except StepFailed as e:
        _log(f"rtrl cycle: {e}")
        code = EXIT_FAILED
    rec = ledger.load(cycle_id)
    if code == EXIT_DONE and rec.status == BLOCKED:
        code = EXIT_BLOCKED
    if code == EXIT_FAILED and rec.status == STUCK:      # that failure was its max_failures-th in a row
        code = EXIT_STUCK
    print(json.dumps({"cycle": asdict(rec)}, default=str))
    return code
