"""`rtrl quality --rewards PATH [--events ARCHIVE_ROOT] [--report DIR]`: run the data-quality suites.

A thin wrapper over `pipelines.quality.check_rewards` / `check_archive` (what the orchestrator calls). Writes
report.md, report.html and report.json into DIR (default <state_dir>/quality/<UTC timestamp>) and prints a
one-screen summary. Exit codes: 0 every suite passed; 3 a suite failed (training on this data is blocked);
2 bad arguments or unreadable input.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime

from infra.commands import add_command

EXIT_OK, EXIT_USAGE, EXIT_FAILED = 0, 2, 3


def _time(text: str | None, flag: str) -> datetime | None:
    if text is None:
        return None
    t = datetime.fromisoformat(text)
    if t.tzinfo is None:
        raise ValueError(f"{flag} {text!r} needs a timezone, e.g. 2026-11-01T10:00:00Z")
    return t


def _sections(cfg):
    """The `[quality]` and `[rewards]` config sections, or their defaults where the config has none."""
    from pipelines.quality.config import QualityConfig
    from pipelines.rewards.spec import RewardSpec

    quality = getattr(cfg, "quality", None)
    spec = getattr(cfg, "rewards", None)
    return (quality if isinstance(quality, QualityConfig) else QualityConfig(),
            spec if isinstance(spec, RewardSpec) else RewardSpec())


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "quality", main,
                    "data-quality suites over the reward table (and event log); a failure blocks training",
                    epilog="exit status: 0 every suite passed; 3 a suite failed (training on this data is blocked); "
                           "2 bad arguments or unreadable input")
    p.add_argument("--rewards", metavar="PATH", help="reward table: a Parquet file or a directory of them")
    p.add_argument("--window", metavar="ID", help="only the reward rows of this window (a cycle id)")
    p.add_argument("--events", metavar="ARCHIVE_ROOT",
                   help="also check the archived event log; its privacy-mode trajectories must have no reward row")
    p.add_argument("--start", metavar="TIME", help="events from this event time on (ISO 8601 with timezone)")
    p.add_argument("--end", metavar="TIME", help="events before this event time (ISO 8601 with timezone)")
    p.add_argument("--report", metavar="DIR",
                   help="write report.md, report.html, report.json here (default <state_dir>/quality/<timestamp>)")


def check_table(cfg, table: str, window: str | None, report_dir) -> tuple[list, dict]:
    """The reward-table suite over `table` (one window's rows with `window`), its report written to `report_dir`:
    (the suite results, the report's paths). The cycle's validate step calls this; OSError and friends propagate."""
    from pipelines.quality import check_rewards, read_reward_table, write_report

    qcfg, spec = _sections(cfg)
    results = [check_rewards(read_reward_table(table, window), spec, cfg=qcfg)]
    meta = {"rewards": str(table), "spec_version": spec.version(), **({"window": window} if window else {})}
    return results, write_report(results, report_dir, meta)


def main(args, cfg) -> int:
    rewards_path = getattr(args, "rewards", None)
    events_root = getattr(args, "events", None)
    if not rewards_path and not events_root:
        print("rtrl quality: give --rewards PATH and/or --events ARCHIVE_ROOT", file=sys.stderr)
        return EXIT_USAGE
    try:
        start = _time(getattr(args, "start", None), "--start")
        end = _time(getattr(args, "end", None), "--end")
    except ValueError as e:
        print(f"rtrl quality: {e}", file=sys.stderr)
        return EXIT_USAGE

    from pyarrow import ArrowInvalid

    from pipelines.archive.manifest import ArchiveError
    from pipelines.quality import check_archive, check_rewards, read_reward_table, summary, write_report
    from schemas import storage

    qcfg, spec = _sections(cfg)
    results, events = [], None
    try:
        if events_root:
            if not storage.exists(storage.normalize(events_root)):
                raise FileNotFoundError(f"event archive {events_root} does not exist")
            result, events = check_archive(events_root, start, end, qcfg)
            results.append(result)
        if rewards_path:
            rewards = read_reward_table(rewards_path, getattr(args, "window", None))
            results.append(check_rewards(rewards, spec, trajectories=events, cfg=qcfg))
    except (OSError, ArchiveError, ArrowInvalid) as e:  # missing, damaged or not Parquet
        print(f"rtrl quality: {e}", file=sys.stderr)
        return EXIT_USAGE

    report_dir = storage.normalize(args.report) if getattr(args, "report", None) else (
        cfg.state_path / "quality" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    meta = {"rewards": rewards_path, "events": events_root, "spec_version": spec.version(),
            "start": start.isoformat() if start else None, "end": end.isoformat() if end else None}
    paths = write_report(results, report_dir, {k: v for k, v in meta.items() if v is not None})
    print(summary(results))
    print(f"report: {paths['md']} (also report.html, report.json)")
    return EXIT_OK if all(r.success for r in results) else EXIT_FAILED
