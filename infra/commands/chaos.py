"""`rtrl chaos [--faults N] [--seed S] [--json]`: the loop under seeded faults; every served request audited.

Progress on stderr; the result as one JSON object on stdout. Exit 0 when no reward was lost or duplicated and at
least --faults faults were injected, 3 otherwise (the figures say which), 1 when the run itself broke.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path


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
