"""`rtrl offline-ab CHECKPOINT...`: checkpoints serve the same simulated population offline; one JSON object on
stdout with the A/B table's metrics per checkpoint (all rows, first turns, retries, per task kind) and each
checkpoint's edit-persistence and dissatisfied-follow-up differences from the first (infra/offline_ab.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from infra.commands import add_command


def _fail(message: str) -> int:
    print(f"rtrl offline-ab: {message}", file=sys.stderr)
    return 1


def _folder(ref: str, cfg) -> Path:
    """A checkpoint folder, or a registered version's local copy (a number: registry version)."""
    path = Path(ref)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"{ref}: not a Hugging Face checkpoint folder (no config.json)")
        return path
    if ref.isdigit():
        from registry.client import Registry

        return Path(Registry.from_config(cfg).local_path(ref))
    raise ValueError(f"{ref}: neither a checkpoint folder nor a registry version number")


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "offline-ab", main,
                    "compare checkpoints on the simulated population offline (same users, in-process sampling): "
                    "the A/B table's metrics per checkpoint, split into first turns, retries and task kinds",
                    epilog="example: rtrl offline-ab .rtrl/policy-v0 .rtrl/demo/checkpoints/rtrl-policy/v3 --users "
                           "96 --hours 2   (~1,300 requests and ~75 s per checkpoint on 2 cores). Needs no stack: "
                           "the checkpoints sample in this process on the deterministic clock, and the reward job's "
                           "computation makes the rows. Differences from the first checkpoint come with paired 95% "
                           "intervals (the same users serve every checkpoint; each user's rows are paired). "
                           "One JSON object on stdout, progress on stderr.")
    p.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                   help="a Hugging Face checkpoint folder, or a registry version number (its local copy)")
    p.add_argument("--users", type=int, default=96, metavar="N", help="simulated users (default 96)")
    p.add_argument("--hours", type=float, default=2.0, metavar="H", help="simulated hours (default 2)")
    p.add_argument("--seed", type=int, metavar="S", help="population seed (default simulator.seed)")
    p.add_argument("--sampling-seed", type=int, default=7, metavar="S",
                   help="the checkpoints' sampling seed (default 7; the same for every checkpoint)")
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="torch CPU threads of each checkpoint's sampling (0 = 1 when checkpoints run at once, "
                        "else torch's default)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="checkpoints served at once, each in a process of its own (default: one per CPU core, "
                        "at most one per checkpoint; 1 = one after the other in this process)")


def main(args, cfg) -> int:
    from pydantic import ValidationError

    from infra.commands import option_errors
    from infra.offline_ab import compare

    if args.hours <= 0:
        return _fail("--hours must be positive")
    try:
        sim = type(cfg.simulator).model_validate({**cfg.simulator.model_dump(), "users": args.users,
                                                  **({"seed": args.seed} if args.seed is not None else {})})
        folders = [_folder(ref, cfg) for ref in args.checkpoints]
    except ValidationError as e:
        return _fail(option_errors(e))
    except (ValueError, KeyError, OSError) as e:
        return _fail(str(e))
    if args.jobs is not None and args.jobs < 1:
        return _fail("--jobs must be at least 1")
    jobs = args.jobs or min(len(folders), os.cpu_count() or 1)
    result = compare([str(f) for f in folders], sim, cfg.rewards, args.hours, args.sampling_seed,
                     progress=lambda line: print(f"[offline-ab] {line}", file=sys.stderr, flush=True), jobs=jobs,
                     threads=args.threads)
    print(json.dumps(result))
    return 0
