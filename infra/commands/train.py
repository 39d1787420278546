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
    p.add_argument("--result", metavar="FILE", help="also write the JSON summary to FILE (rank 0, atomically): how "
                   "the cycle's train step reads a run on several ranks")
    p.add_argument("--org", metavar="ORG", help="train ORG's specialized adapter instead of the shared lineage: a "
                   "LoRA adapter ([specialize] rank and minimum rows) over the shared champion, on ORG's rows alone, "
                   "registered in ORG's lineage (<model>.org-ORG)")


def _launch_args(args, ranks: int) -> list[str]:
    """`rtrl`'s arguments for each rank: this command again with `trainer.ranks` set (so no rank launches)."""
    from infra.argv import rtrl_args

    own = ["train", "--cycle", args.cycle]
    for flag, value in (("--rewards", args.rewards), ("--as-of", args.as_of), ("--window", args.window),
                        ("--org", args.org), ("--result", args.result)):
        if value:
            own += [flag, value]
    return rtrl_args(*own, config=args.config, overrides=[*args.overrides, f"trainer.ranks={ranks}"])


def train_cycle(cfg, cycle_id: str, *, window: str | None = None, as_of: str | None = None, org: str | None = None,
                rewards=None, log=lambda msg: None, on_step=None) -> dict:
    """A cycle's training on this process's rank (trainer.run.run_training): the champion (an org's adapter over
    it with `org`) on the rows of `window`, registered as a candidate; the result as a dict. SelectionError when
    the rows cannot train (too few usable, immature), LookupError for an unknown org or reward table. The cycle's
    train and specialize steps call this."""
    from dataclasses import asdict

    from infra.commands.rewards import _time
    from registry.client import Registry, check_org
    from trainer.run import run_training

    from schemas import storage

    rewards = storage.normalize(rewards) if rewards else cfg.reward_table()
    if not storage.exists(rewards):
        raise LookupError(f"reward table {rewards} does not exist (run `rtrl rewards --cycle ID` first)")
    trainer_cfg = cfg.trainer
    if org is not None:
        try:
            check_org(org)
        except ValueError as e:
            raise LookupError(f"--org: {e}") from None
        trainer_cfg = cfg.specialize.trainer(cfg.trainer)
    result = run_training(trainer_cfg, Registry.from_config(cfg), rewards, cycle_id,
                          cfg.state_path / "train" / (f"org-{org}" if org else ""),
                          _time(as_of, "as-of") if as_of else None, log=log, on_step=on_step, window=window,
                          org=org)
    return asdict(result)


def main(args, cfg) -> int:
    import os

    from infra.progress import ProgressLine
    from trainer.launch import needs_launch, relaunch
    from trainer.selection import SelectionError

    ranks = cfg.trainer.ranks if args.ranks is None else args.ranks
    if ranks < 1:
        print("rtrl train: --ranks must be at least 1", file=sys.stderr)
        return 2
    if needs_launch(ranks):
        relaunch(ranks, _launch_args(args, ranks))      # does not return: this process becomes torchrun
    main_rank = os.environ.get("RANK", "0") == "0"      # the other ranks print neither progress nor the summary
    state = {"step": 0, "loss": 0.0, "reward": 0.0}

    def on_step(m):
        state.update(step=m.step, loss=m.loss, reward=m.reward_mean)

    line = ProgressLine(lambda s: f"train {args.cycle} · step {state['step']} · loss {state['loss']:+.4f} · "
                                  f"reward {state['reward']:+.3f} · {s:.0f}s")
    try:  # stdout carries only the JSON summary: library chatter (DeepSpeed's op builds) goes to stderr
        with line if main_rank else contextlib.nullcontext(), contextlib.redirect_stdout(sys.stderr):
            result = train_cycle(cfg, args.cycle, window=args.window, as_of=args.as_of, org=args.org,
                                 rewards=args.rewards, log=lambda msg: print(msg, file=sys.stderr, flush=True),
                                 on_step=on_step)
    except (SelectionError, LookupError) as e:
        print(f"rtrl train: {e}", file=sys.stderr)
        return 2
    if main_rank:
        text = json.dumps(result, default=str)
        if args.result:
            out = Path(args.result)
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(out)
        print(json.dumps({"train": result}, default=str))
    return 0
