"""`rtrl bench ab`: one cycle's A/B metrics over N reward rows (default 10 million), Parquet in, stored result out.

The rows are demo rows (pipelines/metrics/demo.py) in the reward table's schema and layout
(`policy_version=*/window=<cycle>/part-0.parquet`, zstd), written before the clock starts. Timed: scanning the
cycle's files (only the columns the metrics read: the per-token list columns of the real table are never loaded),
the per-user sums and latency histogram, every interval (delta method, bucket bootstrap, mSPRT), SRM,
per-checkpoint and per-org breakdowns, monitors, and writing the result to the store, for a cycle that has
earlier cycles in the store (so the cumulative, always-valid part reads their stored sums too).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path


def run(rows: int, users: int, log=print) -> dict:
    import polars as pl

    from pipelines.metrics.config import AbConfig
    from pipelines.metrics.cycle import compute_cycle_metrics, scan_cycle
    from pipelines.metrics.demo import DemoSpec, demo_rows, write_demo_table
    from pipelines.metrics.store import MetricsStore

    tmp = Path(tempfile.mkdtemp(prefix="rtrl-bench-ab-"))
    try:
        spec = DemoSpec(users=users)
        table, store, cfg = tmp / "table", MetricsStore(tmp / "ab"), AbConfig()
        log(f"bench ab: writing 2 earlier cycles of {min(rows, 1_000_000):,} rows and the timed cycle of {rows:,} rows")
        for c in range(2):
            prev = demo_rows(min(rows, 1_000_000), cycle=c, spec=spec)
            write_demo_table(table, f"c{c}", prev)
            store.write(f"c{c}", compute_cycle_metrics(scan_cycle(table, f"c{c}"), f"c{c}", config=cfg,
                                                       store=store))
        t_gen = time.perf_counter()
        big = demo_rows(rows, cycle=2, spec=spec)
        files = write_demo_table(table, "c2", big)
        bytes_on_disk = sum(f.stat().st_size for f in files)
        del big
        log(f"bench ab: generated and wrote {rows:,} rows ({bytes_on_disk / 1e6:.0f} MB Parquet) in "
            f"{time.perf_counter() - t_gen:.1f} s; computing")
        t0 = time.perf_counter()
        result = compute_cycle_metrics(scan_cycle(table, "c2"), "c2", config=cfg, store=store)
        store.write("c2", result)
        seconds = time.perf_counter() - t0
        return {"rows": int(result.counts["rows"]), "seconds": round(seconds, 2),
                "rows_per_s": round(result.counts["rows"] / seconds), "users": sum(result.counts["users_by_arm"].values()),
                "parquet_mb": round(bytes_on_disk / 1e6, 1), "earlier_cycles": 2, "polars": pl.__version__,
                "polars_threads": pl.thread_pool_size(),
                "edit_persistence_change": result.metric("edit_persistence_rate").change}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
