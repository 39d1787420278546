"""`rtrl offline-ab CHECKPOINT...`: checkpoints serve the same simulated population offline; one JSON object on
stdout with the A/B table's metrics per checkpoint (all rows, first turns, retries, per task kind) and each
checkpoint's edit-persistence and dissatisfied-follow-up differences from the first (infra/offline_ab.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


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
