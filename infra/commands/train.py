"""`rtrl train`: a cycle's reward rows -> a candidate checkpoint (trainer/run.py), with a progress line."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from infra.commands import add_command


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "train", main,
                    "train the champion on a cycle's reward rows; register the result as a candidate version",
                    epilog="Several ranks (trainer.ranks or --ranks N): the command starts itself again under "
                           "torchrun, one process per rank (one per GPU; gloo on the CPU); rank 0 alone registers the "
                           "candidate and prints the summary. ZeRO stage from trainer.zero_stage. A killed run resumes "
                           "from its last step checkpoint.")
    p.add_argument("--cycle", required=True, metavar="ID", help="cycle id (names the run; one candidate each)")
    p.add_argument("--rewards", metavar="PATH", help="reward table (default: <state_dir>/rewards/table)")
    p.add_argument("--as-of", metavar="TIME", help="refuse rows maturing after this ISO time (the cycle's as_of)")
    p.add_argument("--window", metavar="ID", help="only the rows of this window (the reward job's cycle id): one "
                   "cycle's data, so no row is trained on twice")
    p.add_argument("--ranks", type=int, metavar="N", help="data-parallel ranks, one process each under torchrun "
                   "(default trainer.ranks)")
    p.add_argument("--org", metavar="ORG", help="train ORG's specialized adapter instead of the shared lineage: a "
                   "LoRA adapter ([specialize] rank and minimum rows) over the shared champion, on ORG's rows alone, "
                   "registered in ORG's lineage (<model>.org-ORG)")


def _launch_args(args, ranks: int) -> list[str]:
    """`rtrl`'s arguments for each rank: this command again with `trainer.ranks` set (so no rank launches)."""
    from infra.argv import rtrl_args

    own = ["train", "--cycle", args.cycle]
    for flag, value in (("--rewards", args.rewards), ("--as-of", args.as_of), ("--window", args.window),
                        ("--org", args.org)):
        if value:
            own += [flag, value]
    return rtrl_args(*own, config=args.config, overrides=[*args.overrides, f"trainer.ranks={ranks}"])


def main(args, cfg) -> int:
    from dataclasses import asdict

    from infra.commands.rewards import _time
    from infra.progress import ProgressLine
    from registry.client import Registry
    from trainer.run import run_training
    from trainer.selection import SelectionError

    from schemas import storage
    from trainer.launch import needs_launch, relaunch

    ranks = cfg.trainer.ranks if args.ranks is None else args.ranks
    if ranks < 1:
        print("rtrl train: --ranks must be at least 1", file=sys.stderr)
        return 2
    rewards = storage.normalize(args.rewards) if args.rewards else cfg.reward_table()
    if not storage.exists(rewards):
        print(f"rtrl train: reward table {rewards} does not exist (run `rtrl rewards --cycle ID` first)",
              file=sys.stderr)
        return 2
    as_of = _time(args.as_of, "as-of") if args.as_of else None
    trainer_cfg = cfg.trainer
    if args.org is not None:
        from registry.client import check_org

        try:
            check_org(args.org)
        except ValueError as e:
            print(f"rtrl train: --org: {e}", file=sys.stderr)
            return 2
        trainer_cfg = cfg.specialize.trainer(cfg.trainer)
    if needs_launch(ranks):
        relaunch(ranks, _launch_args(args, ranks))      # does not return: this process becomes torchrun
    import os

    main_rank = os.environ.get("RANK", "0") == "0"      # the other ranks print neither progress nor the summary
    state = {"step": 0, "loss": 0.0, "reward": 0.0}

    def on_step(m):
        state.update(step=m.step, loss=m.loss, reward=m.reward_mean)

    line = ProgressLine(lambda s: f"train {args.cycle} · step {state['step']} · loss {state['loss']:+.4f} · "
                                  f"reward {state['reward']:+.3f} · {s:.0f}s")
    try:  # stdout carries only the JSON summary: library chatter (DeepSpeed's op builds) goes to stderr
        with line if main_rank else contextlib.nullcontext(), contextlib.redirect_stdout(sys.stderr):
            result = run_training(trainer_cfg, Registry.from_config(cfg), rewards, args.cycle,
                                  cfg.state_path / "train" / (f"org-{args.org}" if args.org else ""), as_of,
                                  log=lambda msg: print(msg, file=sys.stderr, flush=True), on_step=on_step,
                                  window=args.window, org=args.org)
    except (SelectionError, LookupError) as e:
        print(f"rtrl train: {e}", file=sys.stderr)
        return 2
    if main_rank:
        print(json.dumps({"train": asdict(result)}, default=str))
    return 0
