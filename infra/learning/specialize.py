"""Specialization by organization on the simulated population, in one process (`rtrl bench specialize`).

    result = run_specialization(cfg, v0_folder, seed=0, work=Path("/tmp/spec"), log=print)
    result["by_org"]["o1"]      # {diff, ci_low, ci_high, se, ...}: specialized - shared on edit persistence
    result["pooled"]            # {diff, ci_low, ci_high, orgs}

One cycle of the learning loop (`infra.learning.loop`: production's cycle by the in-process executor) with the
cycle's `specialize` step on for every org (`specialize.enabled`, `specialize.orgs`):

  shared      v0 serves new users; the reward and task-outcome rows; the shared candidate trained, gated by the one
              gate (infra.gate_suites: every suite of gate.suites, against the champion and v0), promoted if it
              passes
  specialize  the cycle's step, as production runs it: per org, a LoRA adapter over the shared champion on that
              org's rows alone, registered in the org's lineage, gated by the same gate (an org's version: the
              held-out tasks and its org's own suite, its org's held-out users), promoted to `champion@<org>` by the
              compare-and-swap when it passes
  score       the seed's fixed scoring users: the shared champion serves every user, and the specialized policy
              serves each org's users with the org's champion (its adapter merged into the shared champion, or the
              shared champion itself when the org has none); per org, specialized - shared on edit persistence,
              paired by user, and the orgs' changes pooled (inverse-variance, as the A/B's `ab_by_org_pooled`)

The live three-arm A/B (`rtrl demo --specialize`) splits each org's users between the arms, so a change of a few
points needs more users and minutes than one 2-core machine serves beside the trainer and the gate; here every
scoring user is served by both policies, and a user's own ease cancels.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import polars as pl

from evals.gate.users import PRIMARY


def org_ids(cfg) -> list[str]:
    """The orgs that may get an adapter: `specialize.orgs`, else every org of the simulated population."""
    return list(cfg.specialize.orgs) or [cfg.simulator.org(k).org_id for k in range(cfg.simulator.orgs)]


def specialize_config(cfg):
    """`cfg` with the cycle's specialize step on for every org that may get an adapter."""
    return cfg.model_copy(update={"specialize": cfg.specialize.model_copy(update={"enabled": True,
                                                                                   "orgs": org_ids(cfg)})})


def run_specialization(cfg, v0: Path, seed: int, work: Path, log: Callable[[str], None] = lambda m: None) -> dict:
    from infra.learning.loop import run_lineage
    from infra.learning.score import Scorer
    from infra.offline_cycle import ServingWorkers

    cfg = specialize_config(cfg)
    with ServingWorkers(cfg.learning.serving_jobs()) as workers:
        scorer = Scorer(cfg, seed, log, workers=workers)
        t0 = time.monotonic()
        lineage = run_lineage(cfg, v0, seed, 1, work, log, workers, scorer)
        seconds = {"cycle": time.monotonic() - t0}
        return _specialize(cfg, v0, seed, work, log, lineage, scorer, seconds)


def _specialize(cfg, v0: Path, seed: int, work: Path, log: Callable[[str], None], lineage: dict, scorer,
                seconds: dict) -> dict:
    from infra.learning.checkpoints import servable
    from infra.learning.loop import lineage_config, lineage_registry, pp
    from infra.orchestrator.ledger import Ledger

    lcfg = lineage_config(cfg, work, seed)
    registry = lineage_registry(lcfg, v0)
    shared = registry.version_of("champion")
    rec = Ledger.for_config(lcfg).load("c1")
    orgs = {org: dict(r) for org, r in ((rec.result("specialize") or {}).get("orgs") or {}).items()}
    for org in org_ids(cfg):
        orgs.setdefault(org, {"trained": False, "reason": "the cycle's specialize step did not run"})
    t = time.monotonic()
    parts, kept = [], []
    for org in orgs:
        label = registry.version_of(f"champion@{org}")
        orgs[org]["served"] = label or shared
        if label:
            parts.append((servable(registry, label, work / "merged"), scorer.sim.users_of(org)))
        else:               # the shared champion serves the org: its users' runs under it are scored already
            kept.append(org)
    if shared not in scorer.units:       # the shared candidate was not promoted: v0 is the shared champion
        scorer.score(registry.resolve("champion")[1], shared)
    scorer.score_parts("specialized", parts, scorer.units[shared].filter(pl.col("org_id").is_in(kept)))
    seconds["score"] = time.monotonic() - t
    out = {"seed": seed, "shared": lineage["cycles"][0], "shared_champion": shared, "v0": lineage["v0"],
           "orgs": orgs, **compare(scorer.units[shared], scorer.units["specialized"], list(orgs)),
           "seconds": {k: round(v, 1) for k, v in seconds.items()}}
    log(f"[specialize] specialized - shared on {PRIMARY}: " + ", ".join(
        f"{org} {pp(out['by_org'][org])}" for org in orgs) + f"; pooled {pp(out['pooled'])}")
    return out


def compare(shared: pl.DataFrame, specialized: pl.DataFrame, orgs: list[str], alpha: float = 0.05) -> dict:
    """Specialized - shared on edit persistence per org (the two policies' unit sums on the same users, paired by
    user) and pooled over the orgs; `orgs_won`: the orgs whose change is above zero.

    `pooled` weighs every org the same, d = mean_k d_k with Var(d) = sum_k Var(d_k) / K^2, over all K orgs: an org
    the gate left on the shared champion is served the same policy on both sides and adds a change of exactly 0, so
    the figure is what the deployment gives its orgs. `pooled_specialized` is the inverse-variance mean over the
    orgs whose policy differs (`pipelines.metrics.by_org.pooled_change`): the change where an adapter serves."""
    from infra.offline_ab import paired_units_difference
    from pipelines.metrics.by_org import pooled_change, wins
    from pipelines.metrics.intervals import normal_interval

    by_org = {org: paired_units_difference(shared.filter(pl.col("org_id") == org),
                                           specialized.filter(pl.col("org_id") == org), PRIMARY, alpha)
              for org in orgs}
    known = [(c["diff"], c["se"] ** 2) for c in by_org.values() if c["diff"] is not None and c["se"]]
    every = [(c["diff"], c["se"] ** 2) for c in by_org.values() if c["diff"] is not None and c["se"] is not None]
    pooled = {"diff": None, "ci_low": None, "ci_high": None, "orgs": len(every)}
    if every:
        diff = sum(d for d, _ in every) / len(every)
        low, high, _ = normal_interval(diff, sum(v for _, v in every) / len(every) ** 2, alpha)
        pooled.update(diff=diff, ci_low=low, ci_high=high)
    return {"by_org": by_org, "pooled": pooled, "pooled_specialized": pooled_change(known, alpha),
            "orgs_won": wins({"orgs": by_org})}

