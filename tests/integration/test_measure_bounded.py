"""The cycle's measure step (infra/orchestrator/steps.py `measure`) over a real reward table and A/B store, four
cycles in a row: each reads its own window of the table and what the previous cycle stored, and its cumulative
results equal one computation over every cycle's rows -- also once the earlier cycles' rows and stored sums are
gone."""

from __future__ import annotations

import shutil
import time

import polars as pl
import pytest

from infra.orchestrator.ledger import CycleRecord
from infra.orchestrator.steps import CycleContext, measure
from pipelines.metrics.cycle import compute_cycle_metrics
from pipelines.metrics.demo import DemoSpec, demo_rows, write_demo_table
from pipelines.metrics.store import MetricsStore
from tests.conftest import make_config

pytestmark = [pytest.mark.integration]


def _context(cfg, cycle_id: str, seq: int, table) -> CycleContext:
    steps = {"collect": {"result": {"champion": "1"}}, "distill": {"result": {"out": str(table)}}}
    return CycleContext(cfg, CycleRecord(cycle_id, seq, "2026-11-01T00:00:00+00:00", time.time(), steps=steps),
                        log=lambda *_: None)


def test_each_measure_reads_its_window_and_the_previous_cycle_and_accumulates_every_cycle(tmp_path):
    cfg = make_config(tmp_path / "state")
    table = tmp_path / "rewards"
    cycles = [demo_rows(3000, cycle=k, spec=DemoSpec(users=200)) for k in range(4)]
    for k, rows in enumerate(cycles):
        write_demo_table(table, f"c{k + 1}", rows)
        if k == 3:      # the rows and stored sums of every cycle before the previous one are gone
            for gone in ("c1", "c2"):
                for d in table.glob(f"policy_version=*/window={gone}"):
                    shutil.rmtree(d)
                for f in (cfg.state_path / "ab" / "cycles" / gone).glob("*.parquet"):
                    f.unlink()
        res = measure(_context(cfg, f"c{k + 1}", k + 1, table))
        assert res.measured and res.rows == rows.height
    last = MetricsStore.for_state_dir(cfg.state_path).read("c4")
    assert last.cumulative_cycles == ["c1", "c2", "c3", "c4"]
    together = compute_cycle_metrics(pl.concat(cycles), "all", config=cfg.ab)
    for m in last.metrics:
        t = together.metric(m.metric)
        assert (m.cum_control, m.cum_treatment) == pytest.approx((t.control, t.treatment), rel=1e-9)
        if not m.metric.startswith("latency"):      # the quantiles: another bootstrap seed
            assert m.cum_change == pytest.approx(t.change, rel=1e-9)
    assert last.srm_cumulative["observed"] == together.srm["observed"]
