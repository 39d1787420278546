"""`rtrl bench learning`: the learning curve. For each of K seeds, the loop runs N full cycles in this process
(`infra.learning.loop`: production's cycle by the in-process executor, the one gate against champion and v0), and
every promoted champion is scored against v0 on the seed's fixed simulated users; then the curve over seeds
(`infra.learning.curve`) and, with --plot, its picture (`infra.learning.plot`).

One JSON object: the settings, per seed its lineage (each cycle's counts, gate verdict, score against v0, seconds),
and the aggregate (per cycle every seed's point; the slope of persistence per cycle; the last champion against the
first promoted one, pooled). Progress on stderr.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable


def v0_folder(cfg, log: Callable[[str], None]) -> Path:
    """v0's checkpoint: policy.base_checkpoint, else the cached default policy (bootstrapped here when missing or
    made by another [policy] config, as `rtrl bootstrap` does)."""
    from trainer.bootstrap.bootstrap import keep_as_default_policy, make_default_policy, policy_cache, stale_reason

    if cfg.policy.base_checkpoint:
        return Path(cfg.policy.base_checkpoint).expanduser().resolve()
    cache = policy_cache(cfg)
    stale = stale_reason(cache, cfg.policy)
    if stale:
        log(f"[v0] bootstrapping the default policy ({stale}; a few minutes)")
        with tempfile.TemporaryDirectory(prefix="v0-") as tmp:
            make_default_policy(cfg.policy, Path(tmp) / "v0", log=lambda m: log(f"[v0] {m}"))
            keep_as_default_policy(Path(tmp) / "v0", cache)
    return cache


def headroom(cfg, v0: Path, seed: int, log: Callable[[str], None]) -> dict:
    """v0 and the scripted policies (`infra.learning.headroom.ladder`) on seed `seed`'s scoring users: each one's
    metrics and its difference from v0."""
    from infra.learning.headroom import ladder
    from infra.learning.score import Scorer

    scorer = Scorer(cfg, seed, log)
    base = scorer.score(v0, "v0")
    out = {"v0": base["summary"]}
    for name, errors in ladder(base["summary"]["outcomes"]).items():
        out[name] = {"errors": errors.__dict__, **scorer.score_scripted(name, errors)}
        log(f"[headroom] {name}: {out[name]['summary']}")
    return out


def run(cfg, cycles: int, seeds: list[int], out_dir: str | None, plot: str | None,
        log: Callable[[str], None], with_headroom: bool = False) -> dict:
    from infra.bench.quiet import quiet_libraries
    from infra.learning.curve import summarize
    from infra.learning.loop import run_lineage

    quiet_libraries()
    v0 = v0_folder(cfg, log)
    work = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="rtrl-learning-"))
    work.mkdir(parents=True, exist_ok=True)
    lineages, seconds = [], {}
    try:
        for seed in seeds:
            t0 = time.monotonic()
            lineage_dir = work / f"seed-{seed}"
            shutil.rmtree(lineage_dir, ignore_errors=True)
            lineages.append(run_lineage(cfg, v0, seed, cycles, lineage_dir, log))
            seconds[str(seed)] = round(time.monotonic() - t0, 1)
            log(f"[bench learning] seed {seed}: {seconds[str(seed)]:.0f}s")
    finally:
        if not out_dir:
            shutil.rmtree(work, ignore_errors=True)
    lc = cfg.learning
    result = {"cycles": cycles, "seeds": seeds, "seconds_per_seed": seconds,
              "executor": "in-process (infra.orchestrator.steps.run_cycle), traffic from files served in process",
              "settings": {"learning": lc.model_dump(), "gate": cfg.gate.model_dump(),
                           "serving_sampling": {"max_tokens": cfg.serving.max_tokens,
                                                "temperature": cfg.serving.temperature},
                           "trainer": cfg.trainer.model_dump()},
              "curve": summarize(lineages, cycles), "lineages": lineages}
    if with_headroom:
        result["headroom"] = headroom(cfg, v0, seeds[0], log)
    if plot:
        from infra.learning.plot import plot_curve

        plot_curve(result, plot)
        log(f"[bench learning] plot written to {plot}")
    if out_dir:
        (work / "learning.json").write_text(json.dumps(result, indent=1, default=str))
    return result
