"""`rtrl bench ranks`: one cycle's training step on N CPU ranks (torchrun, gloo) at a ZeRO stage, against the same
global batch on one rank; the checks and their tolerances are in infra/bench/ranks_cycle.py.

    result, ok = run(args, cfg, log)      # the JSON fields: ranks, zero_stage, candidates_registered, ...

Cheap to import (the CLI parser imports it for `add_arguments`): the work is imported when it runs.
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the multi-rank run (default 2)")
    parser.add_argument("--zero-stage", type=int, nargs="+", default=[3], choices=(0, 1, 2, 3), metavar="STAGE",
                        help="ZeRO stage of the multi-rank run (default 3); several (e.g. 1 2 3) run one multi-rank "
                             "run each against the one reference, listed under `stages`, the last one's fields at "
                             "the top level")


def run(args, cfg, log) -> tuple[dict, bool]:
    import tempfile
    import time
    from pathlib import Path

    from infra.bench.ranks_cycle import prepare, train_cycle, verdict

    if args.ranks < 2:
        raise SystemExit("rtrl bench ranks: --ranks must be at least 2")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as tmp:
        setup = prepare(Path(tmp))
        one = train_cycle(setup, "one", 1, 1, log)
        stages = []
        for stage in args.zero_stage:
            many = train_cycle(setup, f"ranks{args.ranks}-zero{stage}", args.ranks, stage, log)
            stages.append(verdict(one, many, Path(tmp) / "v1"))
    result = dict(stages[-1][0])
    if len(stages) > 1:
        result["stages"] = [r for r, _ in stages]
    result["seconds"] = round(time.perf_counter() - t0, 1)
    return result, all(ok for _, ok in stages)
