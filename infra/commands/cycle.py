"""`rtrl cycle [ID]`: one cycle by the in-process executor (infra.orchestrator.steps.run_cycle): the same step
functions the Dagster job runs, one after another in this process, recorded in the same ledger.

    rtrl cycle            the next cycle (c1, c2, ...), or the one a crash left unfinished
    rtrl cycle c3         cycle c3: a new one, or resumed where it stopped (its done steps are not run again)

Prints each step's progress on stderr and the cycle's ledger record as one JSON object on stdout. Exit codes: 0 the
cycle is done; 3 it is blocked (a data-quality suite failed, too few usable rows); 1 a step failed (run the same
cycle again to resume); 2 bad arguments (an invalid cycle id, a cycle still running elsewhere).
"""

from __future__ import annotations

import json
import sys

from infra.commands import add_command

EXIT_DONE, EXIT_FAILED, EXIT_USAGE, EXIT_BLOCKED = 0, 1, 2, 3


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "cycle", main, "run one cycle in this process: collect, distill, validate, measure, "
                    "train, evaluate, promote, specialize, deploy (the Dagster job's steps)",
                    epilog="A crashed or failed cycle resumes where it stopped when run again with its id; a done or "
                           "blocked one is not run again. Exit 0 done, 3 blocked, 1 a step failed, 2 bad arguments.")
    p.add_argument("cycle", nargs="?", metavar="ID", help="cycle id (default: the unfinished cycle, else the next)")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(args, cfg) -> int:
    from dataclasses import asdict

    from infra.config import load_config
    from infra.orchestrator.cadence import pid_alive
    from infra.orchestrator.clock import clock_for
    from infra.orchestrator.errors import StepFailed
    from infra.orchestrator.ledger import BLOCKED, FAILED, RUNNING, Ledger
    from infra.orchestrator.steps import CycleBlocked, context_for, run_cycle

    ledger = Ledger.for_config(cfg)
    cycle_id = args.cycle
    if cycle_id is None:
        unfinished = [r for r in ledger.all() if r.status in (RUNNING, FAILED)]
        cycle_id = unfinished[-1].cycle_id if unfinished else ledger.next_id()
    try:
        old = ledger.load(cycle_id)
    except ValueError as e:
        print(f"rtrl cycle: {e}", file=sys.stderr)
        return EXIT_USAGE
    if old is not None and old.status == RUNNING and not old.dagster_run_id and pid_alive(old):
        print(f"rtrl cycle: cycle {cycle_id} is running in process {old.runner_pid}", file=sys.stderr)
        return EXIT_USAGE
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
    except StepFailed as e:
        _log(f"rtrl cycle: {e}")
        code = EXIT_FAILED
    rec = ledger.load(cycle_id)
    if code == EXIT_DONE and rec.status == BLOCKED:
        code = EXIT_BLOCKED
    print(json.dumps({"cycle": asdict(rec)}, default=str))
    return code
