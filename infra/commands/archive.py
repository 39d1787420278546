"""`rtrl archive [--until-idle S] [--detach]`: archive the event topics to the Parquet event log."""

from __future__ import annotations

import json
import sys
import time

from infra.argv import rtrl_argv
from infra.commands import add_command


def _child_argv(args) -> list[str]:
    until_idle = ["--until-idle", repr(args.until_idle)] if args.until_idle is not None else []
    return rtrl_argv("archive", *until_idle, config=args.config, overrides=args.overrides)


def _detach(args, cfg) -> int:
    from infra.stack.process import ManagedProcess
    from pipelines.archive.layout import archive_root
    from pipelines.archive.lock import RootLock

    root = archive_root(cfg)
    proc = ManagedProcess("archiver", cfg.state_path)
    if (rec := proc.info()) is not None:
        print(json.dumps({"archiver": "already running", "pid": rec["pid"], "log": str(proc.logfile)}))
        return 0
    rec = proc.start(_child_argv(args), extra={"root": str(root)})
    # Started = it holds the root's lock (taken first thing, before recovery, which it then logs).
    proc.wait_healthy(lambda: RootLock.holder(root) == rec["pid"], cfg.archive.topic_wait_s + 30,
                      f"archive root {root} locked by the archiver")
    print(json.dumps({"archiver": "started", "pid": rec["pid"], "root": str(root), "log": str(proc.logfile)}))
    return 0


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "archive", main, "archive Kafka topics to the Parquet event log")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")
    p.add_argument("--until-idle", type=float, metavar="SECONDS",
                   help="stop after SECONDS with no new message (default: run until stopped)")


def main(args, cfg) -> int:
    if args.detach:
        return _detach(args, cfg)
    from kafka.errors import KafkaError

    from pipelines.archive.archiver import Archiver
    from pipelines.archive.consumer import SourceError
    from pipelines.archive.manifest import ArchiveError

    def log(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    try:
        archiver = Archiver.from_config(cfg, log=log)
        stats = archiver.run(until_idle_s=args.until_idle)
    except (ArchiveError, SourceError) as e:
        print(f"rtrl archive: {e}", file=sys.stderr)
        return 1
    except KafkaError as e:
        print(f"rtrl archive: Kafka at {cfg.kafka.bootstrap()}: {type(e).__name__}: {e} (is the broker up? "
              "`rtrl up`)", file=sys.stderr)
        return 1
    print(json.dumps({"archive": stats.as_dict()}), flush=True)
    return 0
