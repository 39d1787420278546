"""A/B metrics between checkpoints, per cycle (docs/ab-dashboard.md): polars over the reward table.

Arms are checkpoints: control is a frozen one, treatment the real-time RL lineage, whose checkpoint changes
every cycle; users are assigned sticky by user hash. For each cycle this package computes, treatment vs control:
edit persistence, dissatisfied follow-ups, latency p50/p95, broken tool calls, persistence of shown edits, edit
rate, clarification rate, tokens per response and the mean reward (`catalog.py` defines each), with

- a fixed-horizon interval of this cycle's change (delta method with users as the unit, `intervals.py`; a
  bucket bootstrap for latency quantiles, `quantiles.py`),
- an always-valid interval and p-value of the change over every cycle so far, safe to look at after every
  cycle (mSPRT confidence sequence, `sequential.py`),
- optional CUPED from a pre-experiment period (`cuped.py`),
- the sample-ratio-mismatch check, flagged at p < 0.001 (`srm.py`),
- immature labels (persistence_label "unknown") excluded from edit persistence and their share reported, rows
  not mature at `as_of` excluded and counted,
- breakdowns per checkpoint (policy_version) and per org, and the reward-hacking monitors (`monitors.py`).

The contract (what the orchestrator calls after a cycle's rewards are written)::

    from pipelines.metrics import AbConfig, MetricsStore, compute_cycle_metrics, scan_cycle

    store = MetricsStore.for_state_dir(cfg.state_path)                # <state_dir>/ab/
    rows = scan_cycle(cfg.reward_table(), cycle_id)  # the cycle's partitions, lazily
    result = compute_cycle_metrics(rows, cycle_id, control_arm="control", treatment_arm="treatment",
                                   as_of=manifest.as_of, config=cfg.ab, store=store)
    store.write(cycle_id, result)

- `rewards`: a polars LazyFrame or DataFrame of reward rows (schemas/rewards.py RewardRow; only the columns in
  `rates.INPUT_COLUMNS` are read). Pass the rows *of this cycle* (those the reward job emitted for it:
  `scan_cycle(table, cycle_id)` reads `policy_version=*/window=<cycle_id>/`); earlier cycles come from the store.
- `cycle_id`: letters, digits, '.', '_', '-'. A cycle is the unit of time of the loop (docs/architecture.md): its rows
  were served by that cycle's checkpoints. Cycles are ordered by when they were first stored; recomputing a
  cycle replaces it in place.
- `control_arm`, `treatment_arm`: values of the rows' `arm` column (default `[ab]` in rtrl.toml); rows of any
  other arm are counted and left out.
- `as_of`: the cycle's cut (datetime with zone or ISO text; the reward cycle manifest's `as_of`). Rows with
  `mature_time` after it are excluded and counted; None keeps every row.
- `config`: `AbConfig` (`[ab]`); `store`: when given, cumulative and always-valid results cover every cycle
  stored before this one, through the totals the previous cycle keeps (per-user sums and latency counts over
  every cycle so far, `cumulative.py`): a cycle reads its own rows, the previous cycle's result and those totals,
  never the earlier cycles; `pre_period`: reward rows from before the arms split, for CUPED (omit it otherwise).

The result is a `CycleMetrics` (result.py): `metrics` (the experiment table), `srm`, `srm_cumulative`,
`counts`, `by_version`, `by_org`, `monitors`, plus the per-user sums, latency histogram and totals that
`store.write` keeps. `MetricsStore.history(last=N)` gives the last N cycles' tables as one small frame (the
dashboard's trends);
`report.py` renders a cycle as Markdown, HTML or JSON (`rtrl ab report`).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AbConfig": "config", "MonitorThreshold": "config", "compute_cycle_metrics": "cycle", "scan_cycle": "cycle",
    "cycle_files": "cycle", "CycleMetrics": "result", "MetricResult": "result", "MetricsStore": "store",
    "METRICS": "catalog", "to_markdown": "report", "to_html": "report", "to_json": "report",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Names load on first use, so `pipelines.metrics.config` (read by the CLI's config) stays light."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"pipelines.metrics.{module}"), name)
