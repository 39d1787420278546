"""`rtrl rewards` (a cycle's Kafka range) and `rtrl replay` (the archived event log): the reward job."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone


def _time(text: str, name: str) -> datetime:
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"rtrl replay: --{name} {text!r} is not an ISO time (e.g. 2026-11-01T00:00Z)") from None
    if t.tzinfo is None:
        raise SystemExit(f"rtrl replay: --{name} {text!r} needs a time zone (e.g. a trailing Z for UTC)")
    return t.astimezone(timezone.utc)


def replay(args, cfg) -> int:
    from pipelines.rewards import replay_job

    archive = args.events or str(cfg.path_or_default(cfg.archive.output_dir, "archive"))
    start, end = _time(args.start, "start"), _time(args.end, "end")
    print(f"replay: {archive} [{start.isoformat()}, {end.isoformat()}) -> {args.out} "
          f"(spec {cfg.rewards.version()})", file=sys.stderr)
    t0 = time.perf_counter()
    try:
        summary = replay_job.run(archive, start, end, args.out, cfg.rewards, shards=args.shards,
                                 beam_args=args.beam_args or None)
    except ValueError as e:
        print(f"rtrl replay: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"replay": {"out": summary.out, "window": summary.window, "rows": summary.rows,
                                 "partitions": [{"file": f, "rows": n} for f, n in summary.partitions],
                                 "seconds": round(time.perf_counter() - t0, 2), **summary.counters}}, indent=2))
    return 0


def cycle(args, cfg) -> int:
    from pathlib import Path

    from pipelines.rewards.cycle_job import run_cycle

    root = cfg.state_path / "rewards"
    out = Path(args.out) if args.out else root / "table"
    t0 = time.perf_counter()
    try:
        m = run_cycle(args.cycle, cfg.kafka.bootstrap(), root, out, cfg.rewards, shards=args.shards,
                      idle_s=args.idle, beam_args=args.beam_args or None,
                      log=lambda msg: print(msg, file=sys.stderr, flush=True))
    except ValueError as e:
        print(f"rtrl rewards: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"rewards": {"cycle": m.cycle_id, "seq": m.seq, "status": m.status, "after": m.after,
                                  "as_of": m.as_of, "records_in_range": m.range["records"],
                                  "rows": sum(n for _, n in m.partitions), "out": str(out),
                                  "seconds": round(time.perf_counter() - t0, 2), **m.counters}}, indent=2))
    return 0
