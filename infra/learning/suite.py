"""The held-out gate suite's resolved rate of a checkpoint, in this process: the eval harness (sandboxed tool
calls, hidden tests) drives `infra.offline_cycle.LocalPolicy` instead of a served endpoint. The suite, its flaky
check, the sampling seeds per turn and the episodes are the gate's (`evals.gate_run.gate_tasks`,
`evals.harness.run_suite`); nothing is logged as training traffic."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def suite_outcomes(cfg, folder: str | Path, label: str, samples: int,
                   log: Callable[[str], None] = lambda m: None) -> dict:
    """Shares of the suite's episodes that resolved the task, had a broken tool call, applied an edit; counts."""
    from evals.gate_run import gate_tasks
    from evals.harness import run_suite
    from infra.offline_cycle import LocalPolicy

    suite_dir, tasks, _ = gate_tasks(cfg, None, None, log)
    policy = LocalPolicy(folder, version=label, arm="eval", seed=cfg.gate.tasks.seed,
                         max_new_tokens=cfg.serving.max_tokens, record=False)
    episodes = run_suite(tasks, policy, arm="eval", samples=samples, seed=cfg.gate.tasks.seed,
                         workers=cfg.gate.tasks.workers,
                         suite_dirs=[suite_dir])
    valid = [e for e in episodes if e.infra_error is None]
    n = max(1, len(valid))
    return {"tasks": len(tasks), "episodes": len(episodes), "infra_errors": len(episodes) - len(valid),
            "resolved": round(sum(e.resolved for e in valid) / n, 4),
            "broken": round(sum(e.broken for e in valid) / n, 4),
            "edited": round(sum(e.edited for e in valid) / n, 4)}
