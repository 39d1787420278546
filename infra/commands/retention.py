"""`rtrl retention [--dry-run] [--json] [--cache-only]`: registry retention by hand (the deploy step runs it after
every cycle): which versions keep their checkpoint files and why, then the deletions and this host's cache bound.

Exit codes: 0 done (or planned, with --dry-run); 1 a deletion failed (retried next time) or a held version's
artifacts are gone; 3 refused (the promotion lock was not free in time).
"""

from __future__ import annotations

import json
import sys

from infra.commands import add_command

EXIT_OK, EXIT_FAILED, EXIT_REFUSED = 0, 1, 3


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "retention", retention, "delete the checkpoint files of versions nothing holds "
                    "(alias, rollback chain, anchor, serving, cycle in flight) and bound this host's checkpoint cache",
                    epilog="Keeps [retention] keep_promoted versions of each rollback chain and every version "
                           "registered less than min_age_s ago; a deleted version keeps its tags, metrics and gate "
                           "reports. Runs under the promotion lock.")
    p.add_argument("--dry-run", action="store_true", help="print the plan; delete nothing")
    p.add_argument("--json", action="store_true", help="one JSON object: the plan, what was deleted, the cache")
    p.add_argument("--cache-only", action="store_true", help="bound this host's checkpoint cache alone (a serving "
                   "or gate host); the registry is only read")


def retention(args, cfg) -> int:
    from infra.retention.run import run_retention
    from registry.promotion import PromotionRefused

    log = (lambda line: print(line, file=sys.stderr)) if not args.json else (lambda line: None)
    try:
        report = run_retention(cfg, dry_run=args.dry_run, cache_only=args.cache_only, log=log)
    except PromotionRefused as e:
        print(f"rtrl retention: refused: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"retention": {"ok": False, "refused": str(e)}}))
        return EXIT_REFUSED
    if args.json:
        print(json.dumps({"retention": report}, indent=2))
    else:
        print(render(report))
    return EXIT_FAILED if report.get("failed") or report.get("lost") else EXIT_OK


def render(report: dict) -> str:
    """The plan as a table (one line per version), then what was done."""
    lines = []
    if "plan" in report:
        lines.append(f"{'version':<16} {'action':<7} reasons")
        for v in report["plan"]:
            lines.append(f"{v['version']:<16} {v['action']:<7} {'; '.join(v['reasons'])}")
        verb = "would delete" if report.get("dry_run") else "deleted"
        done = report.get("to_delete") if report.get("dry_run") else report.get("deleted")
        lines.append(f"{verb}: {', '.join(done) or 'nothing'}; kept {report.get('keep', 0)}, waiting "
                     f"{report.get('wait', 0)}, already deleted {report.get('gone', 0)}")
        masters = report.get("to_trim") if report.get("dry_run") else report.get("trimmed")
        if masters:
            lines.append(f"{verb} the float32 master alone (a delta chain holds the served weights): "
                         f"{', '.join(masters)}")
        for label, why in (report.get("failed") or {}).items():
            lines.append(f"failed: {label}: {why}")
        if report.get("lost"):
            lines.append(f"held but artifacts gone: {', '.join(report['lost'])}")
    if (cache := report.get("cache")) is not None:
        evicted = [f"{e['model']}/{'v' + e['version'] if e['version'] else '(partial)'}" for e in cache["evicted"]]
        verb = "would evict" if cache["dry_run"] else "evicted"
        lines.append(f"cache: {cache['bytes_before']:,} -> {cache['bytes_after']:,} bytes (max {cache['max_bytes']:,})"
                     + (f"; {verb} {', '.join(evicted)}" if evicted else ""))
    return "\n".join(lines)
