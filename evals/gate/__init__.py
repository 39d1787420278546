"""The evaluation gate: paired statistics over `evals.records.Episode`s, the promote/keep decision, its report
and its MLflow record (docs/gate.md). Promotion itself is registry/promotion.py.

    from evals.gate import decide, TasksGateConfig
    result = decide(episodes, TasksGateConfig())      # result.decision: "promote" | "keep_champion"

Names are imported lazily: infra/config.py imports `evals.gate.config` at every CLI start, which must not pull
in numpy and scipy.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"GateConfig": "config", "TasksGateConfig": "config", "GuardrailMargins": "config", "GateResult": "decision",
            "decide": "decision",
            "PROMOTE": "decision", "KEEP": "decision", "write_report": "report", "log_to_mlflow": "tracking"}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'evals.gate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"evals.gate.{_EXPORTS[name]}"), name)
