"""`rtrl replay`: recompute rewards from the archived event log over a time range (the reward job of
infra/commands/rewards.py on files instead of a Kafka range). A progress line on stderr, a JSON summary on stdout.
Exit 1, before any work, when the archive does not exist or holds no event in [start, end)."""

from __future__ import annotations

import json
import sys
import time

from infra.commands import add_command
from infra.commands.rewards import SHARDS_HELP, _line, _time, summarize


def add_parser(subparsers) -> None:
    rep = add_command(subparsers, "replay", replay,
                      "recompute rewards from the archived event log over a time range (data engineers)")
    rep.add_argument("--events", metavar="ARCHIVE", help="archive root (default: archive.output_dir)")
    rep.add_argument("--start", required=True, metavar="TIME", help="ISO time with zone, e.g. 2026-11-01T00:00Z")
    rep.add_argument("--end", required=True, metavar="TIME", help="exclusive; requests made in [start, end)")
    rep.add_argument("--out", required=True, metavar="DIR", help="reward table output (never the production one "
                     "unless you say so)")
    rep.add_argument("--cycles", metavar="DIR", help="the live cycles' rewards state (default: rewards_dir): "
                     "an event a recorded cycle read is late exactly when that cycle found it late; other events "
                     "are judged by their archived received_time")
    rep.add_argument("--no-cycles", action="store_true", help="judge every event's lateness by its received_time")
    rep.add_argument("--shards", type=int, help=SHARDS_HELP)
    rep.add_argument("beam_args", nargs="*", metavar="BEAM_OPTION",
                     help="after --: Beam pipeline options, e.g. -- --runner=FlinkRunner --flink_master=HOST:8081")


BUILD_ONE = ("build one with `rtrl archive` (from Kafka) or `rtrl archive import FILE_OR_DIR` (from wire JSON "
             "lines), or name another with --events")


def archive_problem(archive: str, start, end) -> str | None:
    """Why a replay of [start, end) over `archive` (a local folder or an object-store URL) would have nothing to
    read, or None when it has events there."""
    from pipelines.archive.manifest import ArchiveError, committed_files
    from pipelines.archive.reader import event_time_span
    from schemas import storage

    root = storage.normalize(archive)
    if not storage.exists(root):
        return f"no archive at {root}: {BUILD_ONE}"
    try:
        if not committed_files(root):
            return f"the archive at {root} holds no committed events: {BUILD_ONE}"
        if event_time_span(root, start, end) is not None:
            return None
        span = event_time_span(root)
    except ArchiveError as e:
        return str(e)
    held = f"its events span {span[0].isoformat()} .. {span[1].isoformat()}" if span else "it holds no events"
    return (f"the archive at {root} holds no event in [{start.isoformat()}, {end.isoformat()}) ({held}); "
            "nothing to replay")


def replay_summary(cfg, archive: str, start, end, out, cycles: str | None, shards: int | None = None,
                   beam_args: list[str] | None = None) -> dict:
    """The reward job over the archive's [start, end) into `out` (pipelines.rewards.replay_job): the summary `rtrl
    replay` prints. ValueError for a replay that cannot run (a spec the recorded cycles do not share, ...). The
    Dagster replay jobs call this too."""
    from pipelines.rewards import progress, replay_job

    t0 = time.perf_counter()
    progress.reset()
    summary = replay_job.run(archive, start, end, out, cfg.rewards, shards=shards,
                             beam_args=cfg.beam.for_job("replay", beam_args or []), cycles=cycles)
    return {"out": summary.out, "window": summary.window, "rows": summary.rows,
            "partitions": [{"file": f, "rows": n} for f, n in summary.partitions],
            "outcome_partitions": [{"file": f, "rows": n} for f, n in summary.outcome_partitions],
            "seconds": round(time.perf_counter() - t0, 2), **summarize(summary.counters),
            "lateness_judged_by": {"live_cycle": summary.counters.get("late_rule_live_cycle", 0),
                                   "receipt_time": summary.counters.get("late_rule_receipt", 0)}}


def replay(args, cfg) -> int:
    from infra.progress import ProgressLine
    from pipelines.archive.layout import archive_root
    from schemas import storage

    archive = args.events or str(archive_root(cfg))
    start, end = _time(args.start, "start"), _time(args.end, "end")
    if (problem := archive_problem(archive, start, end)) is not None:
        print(f"rtrl replay: {problem}", file=sys.stderr)
        return 1
    cycles = None if args.no_cycles else (args.cycles or str(cfg.rewards_root()))
    if args.cycles and not storage.list_files(storage.join(args.cycles, "cycles"), "*.json", recursive=False):
        print(f"rtrl replay: --cycles {args.cycles} holds no cycle manifests (cycles/*.json)", file=sys.stderr)
        return 1
    print(f"replay: {archive} [{start.isoformat()}, {end.isoformat()}) -> {args.out} "
          f"(spec {cfg.rewards.version()}; lateness from {cycles or 'receipt times'})", file=sys.stderr)
    try:
        with ProgressLine(lambda s: _line("replay", s)):
            summary = replay_summary(cfg, archive, start, end, args.out, cycles, args.shards, args.beam_args)
    except ValueError as e:
        print(f"rtrl replay: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"replay": summary}, indent=2))
    return 0
