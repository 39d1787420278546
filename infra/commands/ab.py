"""`rtrl ab compute --cycle ID` (a cycle's A/B metrics from the reward table, stored under <state_dir>/ab/) and
`rtrl ab report [--cycle ID] --format md|html|json` (a stored cycle, for people who want numbers without the UI)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from infra.commands import add_command


def add_parser(subparsers) -> None:
    ab = add_command(subparsers, "ab", main, "A/B metrics per cycle: compute them from the reward table, or report "
                     "them", epilog="Results live in <state_dir>/ab/cycles/<ID>/ (the orchestrator writes them after "
                     "each cycle). Settings: [ab] in rtrl.toml.")
    actions = ab.add_subparsers(dest="ab_command", metavar="ACTION", required=True)
    abr = actions.add_parser("report", help="print (or write) a stored cycle's A/B report")
    abr.add_argument("--cycle", metavar="ID", help="cycle id (default: the latest stored cycle)")
    abr.add_argument("--format", choices=("md", "html", "json"), default="md", help="output format (default md)")
    abr.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    abc = actions.add_parser("compute", help="compute a cycle's A/B metrics from its reward rows and store them")
    abc.add_argument("--cycle", required=True, metavar="ID",
                     help="cycle id: reads <rewards>/policy_version=*/window=ID/")
    abc.add_argument("--rewards", metavar="PATH", help="reward table root (default <state_dir>/rewards/table)")
    abc.add_argument("--as-of", metavar="TIME", help="exclude rows maturing after this ISO time (default: the reward "
                     "cycle manifest's as_of when there is one)")
    abc.add_argument("--pre-period", metavar="PATH", help="reward rows from before the arms split (a Parquet file or "
                     "folder) for CUPED")


def main(args, cfg) -> int:
    if args.ab_command == "report":
        return report(args, cfg)
    if args.ab_command == "compute":
        return compute(args, cfg)
    raise SystemExit(f"unknown ab action {args.ab_command!r}")


def report(args, cfg) -> int:
    from pipelines.metrics.report import render
    from pipelines.metrics.store import MetricsStore

    store = MetricsStore.for_state_dir(cfg.state_path)
    cycle = args.cycle or (store.cycles() or [None])[-1]
    if cycle is None:
        print(f"rtrl ab report: no A/B results under {store.root} yet (run `rtrl demo`, or `rtrl ab compute "
              "--cycle ID` after a reward cycle)", file=sys.stderr)
        return 2
    try:
        text = render(store.read(cycle), args.format)
    except (FileNotFoundError, ValueError) as e:
        print(f"rtrl ab report: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
        print(f"report: {args.out}", file=sys.stderr)
    else:
        print(text)
    return 0


def _manifest_as_of(cfg, cycle: str) -> str | None:
    from schemas import storage

    try:
        return json.loads(storage.read_text(storage.join(cfg.rewards_root(), "cycles", f"{cycle}.json"))).get("as_of")
    except (OSError, ValueError):
        return None


def compute(args, cfg) -> int:
    import time

    import polars as pl

    from pipelines.metrics.cycle import compute_cycle_metrics, scan_cycle
    from pipelines.metrics.store import MetricsStore

    from schemas import storage

    table = storage.normalize(args.rewards) if args.rewards else cfg.reward_table()
    as_of = args.as_of or _manifest_as_of(cfg, args.cycle)
    store = MetricsStore.for_state_dir(cfg.state_path)
    t0 = time.perf_counter()
    try:
        rows = scan_cycle(table, args.cycle)
        pre = None
        if args.pre_period:
            p = Path(args.pre_period)
            pre = pl.scan_parquet(sorted(p.rglob("*.parquet")) if p.is_dir() else p, hive_partitioning=False)
        result = compute_cycle_metrics(rows, args.cycle, as_of=as_of, config=cfg.ab, store=store, pre_period=pre)
    except (FileNotFoundError, ValueError) as e:
        print(f"rtrl ab compute: {e}", file=sys.stderr)
        return 2
    where = store.write(args.cycle, result)
    table_summary = {m.metric: {"control": m.control, "treatment": m.treatment, "change": m.change,
                                "interval": [m.low, m.high], "verdict": m.verdict} for m in result.metrics}
    print(json.dumps({"ab": {"cycle": args.cycle, "seq": result.seq, "stored": str(where),
                             "rows_used": result.counts["rows_used"], "users": result.counts["users_by_arm"],
                             "srm_flagged": result.srm["flagged"], "srm_p_value": result.srm["p_value"],
                             "red_monitors": [m["metric"] for m in result.monitors if m["status"] == "red"],
                             "metrics": table_summary, "seconds": round(time.perf_counter() - t0, 2)}}, indent=2))
    return 0
