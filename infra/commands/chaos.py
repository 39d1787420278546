"""`rtrl chaos [--faults N] [--seed S] [--json]`: the loop under seeded faults; every served request audited.

Progress on stderr; the result as one JSON object on stdout. Exit 0 when no reward was lost or duplicated and at
least --faults faults were injected, 3 otherwise (the figures say which), 1 when the run itself broke.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from infra.commands import add_command


def add_parser(subparsers) -> None:
    ch = add_command(subparsers, "chaos", main,
                     "fault injection: run the loop while killing and restarting its parts at seeded moments and "
                     "flooding replays; then check every served request got exactly one reward row",
                     epilog="Runs in its own state dir (default <state_dir>/chaos, wiped first) on free ports: the "
                            "stack with a durable broker log (storage s3), collector, archiver, serving, simulated "
                            "users, a reward cycle every few faults, the trainer. Faults: broker, archiver, "
                            "collector, serving (SIGKILL, down a seeded while, restarted), reward_job, trainer "
                            "(SIGKILL mid-run, run again), duplicates, out_of_order, late_events (replays produced to "
                            "Kafka). Prints faults_injected, requests_served, rewards_expected, rewards_lost, "
                            "rewards_duplicated, rewards_pending, max_recovery_seconds, faults_by_type. Exit 0: "
                            "nothing lost or duplicated; 3: something was; 1: the run broke. Example: rtrl chaos "
                            "--faults 20 --seed 0 --json")
    ch.add_argument("--faults", type=int, default=20, metavar="N", help="faults to inject (default 20)")
    ch.add_argument("--seed", type=int, default=0, help="seed of the fault plan and the users (default 0)")
    ch.add_argument("--json", action="store_true", help="print the result as one JSON line (default: indented)")
    ch.add_argument("--types", metavar="T1,T2", help="only these fault types (default: all of broker, archiver, "
                    "collector, serving, reward_job, trainer, duplicates, out_of_order, late_events)")
    ch.add_argument("--users", type=int, default=12, metavar="N", help="simulated users (default 12)")
    ch.add_argument("--speed", type=float, default=60.0, metavar="X",
                    help="simulated seconds per wall second (default 60)")
    ch.add_argument("--lateness", type=float, default=60.0, metavar="WALL_S",
                    help="allowed lateness in wall seconds: rewards.allowed_lateness_s = this x --speed (default 60)")
    ch.add_argument("--warmup", type=float, default=20.0, metavar="S", help="seconds of traffic before the first "
                    "fault (default 20)")
    ch.add_argument("--cycle-every", type=int, default=4, metavar="K", help="a reward cycle after every K faults "
                    "(default 4), besides the reward-job faults' own")
    ch.add_argument("--state-dir", metavar="DIR", help="where the run lives (default <state_dir>/chaos; wiped "
                    "first)")
    ch.add_argument("--serving-cores", metavar="CORES", help="serving.cpu_cores of the run's vLLM engine (default: "
                    "the last core, away from another stack's serving on core 0; '' = vLLM's choice)")
    ch.add_argument("--keep-running", action="store_true", help="leave the loop running at the end (`rtrl --set "
                    "state_dir=DIR down` stops it)")


def main(args, cfg) -> int:
    from infra.chaos.plan import FAULT_TYPES
    from infra.chaos.runner import ChaosOptions, ChaosRun
    from infra.orchestrator.rtrl_cli import StepFailed

    types = tuple(t.strip() for t in args.types.split(",")) if args.types else FAULT_TYPES
    if unknown := sorted(set(types) - set(FAULT_TYPES)):
        print(f"rtrl chaos: unknown fault types {unknown}; known: {', '.join(FAULT_TYPES)}", file=sys.stderr)
        return 2
    if args.faults < 1:
        print("rtrl chaos: --faults must be at least 1", file=sys.stderr)
        return 2
    state = Path(args.state_dir).expanduser().resolve() if args.state_dir else cfg.state_path / "chaos"
    if state == cfg.state_path:
        print("rtrl chaos: --state-dir must not be the main state dir (the run wipes it first)", file=sys.stderr)
        return 2
    opt = ChaosOptions(faults=args.faults, seed=args.seed, types=types, users=args.users, speed=args.speed,
                       lateness_wall_s=args.lateness, warmup_s=args.warmup, cycle_every=args.cycle_every,
                       keep_running=args.keep_running, serving_cores=args.serving_cores)
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(f"{time.monotonic() - t0:6.0f}s {msg}", file=sys.stderr, flush=True)

    run = ChaosRun(args.config, args.overrides, state, opt, log, v0_cache=cfg.state_path / "policy-v0")

    import signal

    def on_term(signum, frame):  # SIGTERM like Ctrl-C: the run's `finally` stops the loop it started
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        report = run.run()
    except StepFailed as e:
        print(f"rtrl chaos: the run broke: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rtrl chaos: interrupted; the loop it started was stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(json.dumps(report) if args.json else json.dumps(report, indent=2), flush=True)
    ok = report["rewards_lost"] == 0 and report["rewards_duplicated"] == 0 and report["faults_injected"] >= args.faults
    return 0 if ok else 3
