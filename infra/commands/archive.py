"""`rtrl archive [--until-idle S] [--detach]`: archive the event topics to the Parquet event log.
`rtrl archive import FILE_OR_DIR`: build an archive from wire-format JSON lines, without Kafka.
`rtrl archive compact`: checkpoint, compact, expire and delete retired files once (what the archiver does every
archive.compact_every_s)."""

from __future__ import annotations

import argparse
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


IMPORT_HELP = "build (or add to) an archive from wire-format JSON lines, without Kafka; bad lines are dead letters"

IMPORT_DESCRIPTION = IMPORT_HELP + """

Each line is one event in the wire format (a JSON object with its event_type and schema_version: what the SDK
sends and the collector produces). A directory is read recursively: *.jsonl, *.ndjson, *.json (each read as JSON
lines), optionally gzipped (.gz). Every line is validated as the archiver validates a Kafka message; older schema
versions are upgraded. Valid events are written as committed archive files (replayable by `rtrl replay`); each
invalid line is a dead letter (file, line, reason, field, detail, the raw line) in a JSON-lines file. An event
without received_time is imported as received at its event_time (on time, for a replay's lateness). A repeated
event_id is imported once. Progress goes to stderr; stdout gets one JSON summary: events read, imported per
event type, dead letters by reason and their file, the event-time span, the archive path.

exit status: 0 imported (dead letters or not), 1 nothing valid to import, no such input, or the root is locked
by a running archiver, 3 with --strict when any line was a dead letter (the valid ones are imported)."""


COMPACT_HELP = "maintain the archive once: checkpoint, compaction, age retention, deletion of retired files"

COMPACT_DESCRIPTION = COMPACT_HELP + """

What the running archiver does every archive.compact_every_s (docs/operations.md): the committed manifests are
folded into a new checkpoint; each partition's small files are merged into files of about
archive.compact_target_bytes; partitions older than archive.retention_s are retired; files retired more than
archive.retire_grace_s ago are deleted. Orphans of crashed writes are deleted first, as the archiver's start-up
does. It takes the root's lock, so it refuses to run beside a running archiver (which maintains the root itself).
Prints one JSON summary.

exit status: 0 done (or nothing to do), 1 the root is locked by a running archiver, missing, or unreadable."""


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "archive", main, "archive Kafka topics to the Parquet event log")
    p.add_argument("--detach", action="store_true", help="run in the background (stopped by `rtrl down`)")
    p.add_argument("--until-idle", type=float, metavar="SECONDS",
                   help="stop after SECONDS with no new message (default: run until stopped)")
    subs = p.add_subparsers(dest="archive_command", metavar="SUBCOMMAND", required=False,
                            title="subcommands (without one: archive Kafka)")
    imp = subs.add_parser("import", help=IMPORT_HELP, description=IMPORT_DESCRIPTION,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.set_defaults(handler=import_main)
    imp.add_argument("path", metavar="FILE_OR_DIR", help="a wire JSON-lines file, or a directory of them")
    imp.add_argument("--archive", metavar="PATH_OR_URL",
                     help="archive root to write, a folder or an s3://bucket/prefix URL (S3 settings from the AWS_* "
                     "environment variables) (default: archive.output_dir, else <state_dir>/archive: where "
                     "`rtrl archive` writes and `rtrl replay` reads)")
    imp.add_argument("--dead-letters", metavar="FILE", help="dead-letter JSON-lines file or URL (default: "
                     "<archive>/_imports/<import id>.dead_letters.jsonl, written only when there are any)")
    imp.add_argument("--strict", action="store_true", help="exit 3 when any line is a dead letter")
    comp = subs.add_parser("compact", help=COMPACT_HELP, description=COMPACT_DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    comp.set_defaults(handler=compact_main)
    comp.add_argument("--archive", metavar="PATH_OR_URL",
                      help="archive root, a folder or an s3://bucket/prefix URL (default: archive.output_dir, else "
                      "<state_dir>/archive)")


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
        if cfg.archive.metrics_port:
            from pipelines.archive.metrics import serve_metrics

            where = f"http://{cfg.archive.metrics_host}:{cfg.archive.metrics_port}/metrics"
            try:
                serve_metrics(archiver, cfg.archive.metrics_host, cfg.archive.metrics_port)
                log(f"archive: metrics at {where}")
            except OSError as e:   # the port is taken (another archiver's, say): archive without metrics
                log(f"WARNING archive: no metrics at {where}: {e} (set archive.metrics_port to a free port, 0 = off)")
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


def import_main(args, cfg) -> int:
    from infra.progress import ProgressLine
    from pipelines.archive.layout import archive_root
    from pipelines.archive.manifest import ArchiveError
    from pipelines.archive.wire_import import ImportSummary, import_wire, new_import_id
    from schemas.storage import StorageError, normalize

    try:
        root = normalize(args.archive) if args.archive else archive_root(cfg)
    except StorageError as e:
        print(f"rtrl archive import: --archive: {e}", file=sys.stderr)
        return 1
    summary = ImportSummary(str(root), new_import_id())
    print(f"archive import: {args.path} -> {root} (import id {summary.import_id})", file=sys.stderr)

    def line(elapsed: float) -> str:
        rate = summary.events_read / elapsed if elapsed > 0 else 0.0
        return (f"archive import: {summary.events_read:,} lines read ({rate:,.0f}/s), {summary.imported_total:,} "
                f"imported, {summary.dead_letters:,} dead letters, {elapsed:.0f}s"
                + (f" [{summary.current_file}]" if summary.current_file else ""))

    try:
        with ProgressLine(line):
            import_wire(args.path, root, args.dead_letters, import_id=summary.import_id, summary=summary)
    except (FileNotFoundError, ArchiveError, StorageError) as e:
        print(f"rtrl archive import: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # the object store refused or could not be reached (credentials, bucket, endpoint)
        print(f"rtrl archive import: writing to {root}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"archive_import": summary.as_dict()}, indent=2), flush=True)
    if not summary.files:
        print(f"rtrl archive import: no *.jsonl, *.ndjson or *.json file (optionally .gz) under {args.path}",
              file=sys.stderr)
        return 1
    if not summary.imported_total:
        print(f"rtrl archive import: no valid event in {args.path} ({summary.events_read} lines read, "
              f"{summary.dead_letters} dead letters{', see ' + summary.dead_letter_file if summary.dead_letter_file else ''})",
              file=sys.stderr)
        return 1
    if summary.dead_letters:
        print(f"rtrl archive import: {summary.dead_letters} dead letter(s), see {summary.dead_letter_file}",
              file=sys.stderr)
        if args.strict:
            return 3
    return 0


def compact_main(args, cfg) -> int:
    from datetime import datetime, timezone

    from pipelines.archive.layout import archive_root
    from pipelines.archive.lock import RootLock
    from pipelines.archive.maintenance import maintain
    from pipelines.archive.manifest import ArchiveError, recover
    from schemas.storage import StorageError, exists, normalize

    try:
        root = normalize(args.archive) if args.archive else archive_root(cfg)
    except StorageError as e:
        print(f"rtrl archive compact: --archive: {e}", file=sys.stderr)
        return 1
    if not exists(root):
        print(f"rtrl archive compact: no archive at {root}", file=sys.stderr)
        return 1
    lock = RootLock(root)
    try:
        lock.acquire()
    except ArchiveError as e:
        print(f"rtrl archive compact: {e} (a running archiver maintains its root itself every "
              f"{cfg.archive.compact_every_s:g}s)", file=sys.stderr)
        return 1
    try:
        rec = recover(root, "", 0)
        result = maintain(root, cfg.archive, datetime.now(timezone.utc), renew=lock.renew,
                          log=lambda line: print(line, file=sys.stderr))
    except (ArchiveError, OSError) as e:
        print(f"rtrl archive compact: {root}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        lock.release()
    print(result.line(), file=sys.stderr)
    print(json.dumps({"archive_compact": {"root": str(root), "checkpoint_read": rec.checkpoint,
                                          "manifests_read": rec.manifests_read,
                                          "orphans_deleted": len(rec.orphans_deleted), **result.as_dict()}},
                     indent=2), flush=True)
    return 0
