"""`rtrl bench gate`: the default gate suite end to end on this machine, the champion against itself.

Both arms are the same version (so the run times exactly what a real gate costs: suite, flaky check, two private
endpoints, K samples per task and arm, grading, decision, report), without MLflow tags. Bootstraps v0 first when
the state dir has no champion. Prints: tasks, episodes, seconds (the whole gate), seconds_per_task (seconds /
tasks), infra_failure_rate (episodes), sandbox_overhead_ms (bubblewrap start vs a plain subprocess, median of 20),
the stage timings and the self-comparison's decision (an equal candidate: promote expected at the suite's power).
"""

from __future__ import annotations

import tempfile
import time
from typing import Callable


def run(cfg, tasks: int | None, samples: int | None, log: Callable[[str], None]) -> dict:
    from evals.gate_run import run_gate
    from evals.sandbox import sandbox_overhead_ms
    from registry.client import Registry

    registry = Registry.from_config(cfg)
    version = registry.version_of("champion")
    if version is None:
        from trainer.bootstrap.bootstrap import bootstrap

        log("[bench gate] no champion in this state dir: running `rtrl bootstrap` first (a few minutes)")
        bootstrap(cfg, log=lambda m: log(f"[bootstrap] {m}"))
        version = registry.version_of("champion")
    if tasks:
        cfg = cfg.model_copy(update={"gate": cfg.gate.model_copy(update={"suite_tasks": tasks})})
    overhead = sandbox_overhead_ms(20)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rtrl-bench-gate-") as out:
        gate = run_gate(cfg, version, version, samples=samples, out_dir=out, track=False, registry=registry, log=log)
    seconds = time.monotonic() - t0
    eps = gate.episodes
    valid = [e for e in eps if e.infra_error is None]
    return {
        "version": version, "tasks": gate.tasks, "quarantined": len(gate.quarantined),
        "samples_per_task": len(eps) // max(1, 2 * gate.tasks), "episodes": len(eps),
        "seconds": round(seconds, 1), "seconds_per_task": round(seconds / max(1, gate.tasks), 2),
        "infra_failure_rate": round((len(eps) - len(valid)) / max(1, len(eps)), 4),
        "sandbox_overhead_ms": overhead["sandbox_overhead_ms"], "sandbox_ms": overhead["sandbox_ms"],
        "plain_subprocess_ms": overhead["plain_ms"],
        "stage_seconds": {k: round(v, 1) for k, v in gate.timings.items()},
        "turns_per_episode": round(sum(e.turns for e in valid) / max(1, len(valid)), 2),
        "resolved_rate": round(sum(e.resolved for e in valid) / max(1, len(valid)), 4),
        "decision": gate.result.decision, "reasons": list(gate.result.reasons),
        "target_seconds": 600, "within_target": seconds <= 600,
    }
