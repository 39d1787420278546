"""Data-quality suites that gate training (docs/architecture.md: reward table -> data-quality suite -> trainer).

Primary API (the orchestrator calls these; `rtrl quality` is a thin wrapper):
    check_rewards(rewards, spec, trajectories=..., privacy_request_ids=..., cfg=...) -> SuiteResult
    check_events(frame, cfg=...) -> SuiteResult          check_archive(root, start, end, cfg) -> (result, frame)
    write_report(results, dir) -> paths of report.md / report.html / report.json;  summary(results) -> text
    read_report(dir) -> the report.json document           (dir: a local folder or an s3:// URL)
    run_suite(name, frame, expectations, key=...) -> SuiteResult   (the GX runner; suites are lists of
                                                                    `Expectation`s from pipelines.quality.expectations)
A `SuiteResult` with `success=False` blocks the cycle's training. Great Expectations is imported only when a
suite runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "QualityConfig": "config", "check_archive": "events", "check_events": "events", "summary": "report",
    "to_html": "report", "to_json": "report", "to_markdown": "report", "write_report": "report",
    "read_report": "report",
    "RuleResult": "result", "SuiteResult": "result", "all_passed": "result", "check_rewards": "rewards",
    "privacy_mode_request_ids": "rewards", "read_reward_table": "rewards", "run_suite": "runner",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Names load on first use, so `pipelines.quality.config` (read by the CLI's config) stays light."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipelines.quality' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pipelines.quality.{module}"), name)
    globals()[name] = value
    return value
