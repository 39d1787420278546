"""`rtrl rewards` (a cycle's Kafka range) and `rtrl rewards-stream` (unbounded, on a portable runner): the reward
job; `rtrl replay` (the archived event log, infra/commands/replay.py) shares this module's summary and progress line.

`rtrl rewards` and `rtrl replay` show a progress line on stderr while the job runs and print a JSON summary on
stdout: events read, dead letters by reason, duplicates dropped, rows emitted and requests still pending (not mature
yet), unknown labels, late requests and late events dropped, and the long loop's: outcome rows emitted (of which
unknown), requests of background tasks whose outcome row is still pending, late task outcomes dropped (also
counted in late events).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime

from infra.commands import add_command

SHARDS_HELP = ("workspace shards, the keys of the job's state: the parallelism a distributed runner can use "
               "(default 4; the DirectRunner runs in one process, where fewer shards cost less)")


def _time(text: str, name: str) -> datetime:
    from schemas.instants import parse_instant

    try:
        return parse_instant(text)
    except ValueError as e:
        raise SystemExit(f"rtrl replay: --{name} {e}") from None


SUMMARY_COUNTERS = ("events_read", "duplicates_dropped", "rows_emitted", "requests_pending", "unknown_labels",
                    "late_requests", "late_events", "outcome_rows", "outcome_unknown", "outcomes_pending",
                    "late_outcomes")


def summarize(counters: dict[str, int]) -> dict:
    """The job's counters in the summary's shape: fixed keys (0 when absent), dead letters grouped by reason."""
    out = {k: int(counters.get(k, 0)) for k in SUMMARY_COUNTERS}
    out["dead_letters"] = {k.removeprefix("dead_letter_"): int(v) for k, v in sorted(counters.items())
                           if k.startswith("dead_letter_")}
    return out


def _line(phase: str, elapsed: float) -> str:
    from pipelines.rewards import progress

    c = progress.snapshot()
    parts = [phase]
    if "range_records" in c and "events_total" not in c:
        return f"{phase} · fixing the offset range: {c['range_records']:,} records · {elapsed:.0f}s"
    if "files_total" in c:
        parts.append(f"files {c.get('files_read', 0)}/{c['files_total']}")
    if "events_total" in c:
        total = max(c["events_total"], 1)
        parts.append(f"events {c.get('events_read', 0):,}/{c['events_total']:,} "
                     f"({100 * c.get('events_read', 0) // total}%)")
    else:
        parts.append(f"events {c.get('events_read', 0):,}")
    parts.append(f"rows {c.get('rows_emitted', 0):,}")
    return " · ".join(parts) + f" · {elapsed:.0f}s"


def add_parser(subparsers) -> None:
    rew = add_command(subparsers, "rewards", cycle, "compute a cycle's rewards from Kafka: the offset range since "
                      "the last cycle + its open join state")
    rew.add_argument("--cycle", required=True, metavar="ID", help="cycle id (a rerun of a started cycle reads the "
                     "same range; a done cycle is not run twice)")
    rew.add_argument("--out", metavar="DIR", help="reward table root, a path or s3:// URL (default: the table under "
                     "rewards_dir, <state_dir>/rewards/table)")
    rew.add_argument("--idle", type=float, default=2.0, metavar="S",
                     help="the range ends where every partition has been quiet for S seconds (default 2)")
    rew.add_argument("--shards", type=int, help=SHARDS_HELP)
    rew.add_argument("beam_args", nargs="*", metavar="BEAM_OPTION", help="after --: Beam pipeline options, added to "
                     "[beam] options and [beam] cycle (e.g. -- --runner=DaskRunner --dask_client_address=HOST:8786)")

    strm = add_command(subparsers, "rewards-stream", stream,
                       "run the reward job continuously on an unbounded Kafka read (a portable runner: Flink, "
                       "Spark, Dataflow)", epilog="example: rtrl rewards-stream --out /data/rewards -- "
                       "--runner=FlinkRunner --flink_master=HOST:8081 --environment_type=LOOPBACK. Needs a JDK for "
                       "Beam's Kafka expansion service (or --expansion-service HOST:PORT); the DirectRunner is "
                       "refused.")
    strm.add_argument("--out", required=True, metavar="DIR", help="reward table root")
    strm.add_argument("--group-id", default="rtrl-rewards", help="Kafka consumer group (default rtrl-rewards)")
    strm.add_argument("--expansion-service", metavar="HOST:PORT", help="a running Beam expansion service for KafkaIO")
    strm.add_argument("--shards", type=int, help=SHARDS_HELP)
    strm.add_argument("beam_args", nargs="*", metavar="BEAM_OPTION", help="after --: Beam options naming the runner "
                      "(added to [beam] options and [beam] stream)")


def cycle_rewards(cfg, cycle_id: str, out=None, shards: int | None = None, idle_s: float = 2.0,
                  beam_args: list[str] | None = None, log=lambda msg: None) -> dict:
    """A cycle's reward job (pipelines.rewards.cycle_job.run_cycle) with the config's state, table and Beam options:
    its summary (the `rewards` object `rtrl rewards --cycle` prints). ValueError when the cycle's range cannot be
    read again (another cluster, another reward spec). The cycle's distill step calls this too."""
    from pipelines.rewards import progress
    from pipelines.rewards.cycle_job import CycleStore, run_cycle
    from schemas import storage

    root = cfg.rewards_root()
    out = storage.normalize(out) if out else cfg.reward_table()
    t0 = time.perf_counter()
    progress.reset()
    m = run_cycle(cycle_id, cfg.kafka, root, out, cfg.rewards, shards=shards, idle_s=idle_s,
                  beam_args=cfg.beam.for_job("cycle", beam_args or []), log=log)
    return {"cycle": m.cycle_id, "seq": m.seq, "status": m.status, "after": m.after, "as_of": m.as_of,
            "records_in_range": m.range["records"], "rows": sum(n for _, n in m.partitions), "out": str(out),
            "dead_letter_file": str(CycleStore(root).dead_letter_path(m.cycle_id)),
            "seconds": round(time.perf_counter() - t0, 2), **summarize(m.counters)}


def cycle(args, cfg) -> int:
    from infra.progress import ProgressLine

    try:
        with ProgressLine(lambda s: _line(f"rewards {args.cycle}", s)):
            summary = cycle_rewards(cfg, args.cycle, args.out, args.shards, args.idle, args.beam_args,
                                    log=lambda msg: print(msg, file=sys.stderr, flush=True))
    except ValueError as e:
        print(f"rtrl rewards: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"rewards": summary}, indent=2))
    return 0


def stream(args, cfg) -> int:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    from pipelines.rewards import stream_job

    options = PipelineOptions(cfg.beam.for_job("stream", args.beam_args))
    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    if runner in ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner"):
        print("rtrl rewards-stream: the unbounded Kafka read needs a portable runner (e.g. -- --runner=FlinkRunner "
              "--flink_master=HOST:8081); on this machine use `rtrl rewards --cycle ID` (bounded ranges)",
              file=sys.stderr)
        return 2
    options.view_as(StandardOptions).streaming = True
    p = beam.Pipeline(options=options)
    stream_job.build(p, stream_job.kafka_source(cfg.kafka, group_id=args.group_id,
                                                expansion_service=args.expansion_service),
                     cfg.rewards, args.out, args.shards)
    print(f"rewards-stream: {runner} reading {cfg.kafka.bootstrap()} -> {args.out}", file=sys.stderr)
    p.run().wait_until_finish()
    return 0
