"""Specialization by organization on the simulated population, in one process (`rtrl bench specialize`).

    result = run_specialization(cfg, v0_folder, seed=0, work=Path("/tmp/spec"), log=print)
    result["by_org"]["o1"]      # {diff, ci_low, ci_high, se, ...}: specialized - shared on edit persistence
    result["pooled"]            # {diff, ci_low, ci_high, orgs}

The cycle is production's steps without the processes, as `infra.learning.loop` runs them, then the cycle's
`specialize` step:

  shared      one cycle of the learning loop: v0 serves new users; the reward and task-outcome rows; the shared
              candidate trained, gated on held-out users against the champion and v0, and promoted if it passes
  adapters    per org, `rtrl train --org`'s job: a LoRA adapter over the shared champion on that org's rows alone
              (`trainer.specialize`), registered in the org's lineage
  gate        each adapter against the shared champion on the org's held-out gate users (`UsersGate` on that org's
              users: the same non-inferiority margin and guardrails), promoted to `champion@<org>` by the
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


def run_specialization(cfg, v0: Path, seed: int, work: Path, log: Callable[[str], None] = lambda m: None) -> dict:
    from infra.learning.gate import UsersGate
    from infra.learning.loop import run_lineage
    from infra.learning.score import Scorer
    from infra.offline_cycle import ServingWorkers

    with ServingWorkers(cfg.learning.serving_jobs()) as workers:
        scorer = Scorer(cfg, seed, log, workers=workers)
        gate = UsersGate(cfg, seed, work / "merged", log, workers=workers)
        t0 = time.monotonic()
        lineage = run_lineage(cfg, v0, seed, 1, work, log, workers, scorer, gate)
        seconds = {"shared": time.monotonic() - t0}
        return _specialize(cfg, v0, seed, work, log, lineage, scorer, gate, seconds)


def _specialize(cfg, v0: Path, seed: int, work: Path, log: Callable[[str], None], lineage: dict, scorer, gate,
                seconds: dict) -> dict:
    from infra.learning.checkpoints import servable
    from infra.learning.loop import lineage_registry, pp

    registry = lineage_registry(cfg, work, v0)
    shared = registry.version_of("champion")
    trainer_cfg = cfg.trainer.model_copy(update={"seed": cfg.trainer.seed + seed})
    orgs: dict[str, dict] = {}
    t = time.monotonic()
    for org in org_ids(cfg):
        orgs[org] = adapter_step(cfg, registry, gate, org, shared, work, trainer_cfg, log)
    seconds["adapters"] = time.monotonic() - t
    t = time.monotonic()
    parts, kept = [], []
    for org in orgs:
        label = registry.version_of(f"champion@{org}")
        orgs[org]["served"] = label or shared
        if label:
            parts.append((servable(registry, label, work / "merged"), scorer.sim.users_of(org)))
        else:               # the shared champion serves the org: its users' runs under it are scored already
            kept.append(org)
    scorer.score_parts("specialized", parts, scorer.units[shared].filter(pl.col("org_id").is_in(kept)))
    seconds["score"] = time.monotonic() - t
    out = {"seed": seed, "shared": lineage["cycles"][0], "shared_champion": shared, "v0": lineage["v0"],
           "orgs": orgs, **compare(scorer.units[shared], scorer.units["specialized"], list(orgs)),
           "seconds": {k: round(v, 1) for k, v in seconds.items()}}
    log(f"[specialize] specialized - shared on {PRIMARY}: " + ", ".join(
        f"{org} {pp(out['by_org'][org])}" for org in orgs) + f"; pooled {pp(out['pooled'])}")
    return out


def adapter_step(cfg, registry, gate, org: str, shared: str, work: Path, trainer_cfg,
                 log: Callable[[str], None]) -> dict:
    """Org `org`'s adapter trained on its rows of the cycle, gated on its users against the shared champion
    `shared`, and promoted when it passes: {trained, candidate, rows, decision, reasons, promoted}."""
    from infra.learning.loop import pp
    from registry.promotion import promote
    from trainer.run import run_training
    from trainer.selection import SelectionError

    say = lambda m: log(f"[specialize {org}] {m}")   # noqa: E731
    t = time.monotonic()
    try:
        trained = run_training(cfg.specialize.trainer(trainer_cfg), registry, work / "rewards", "c1",
                               work / f"train-{org}", log=say, window="c1", org=org)
    except SelectionError as e:          # too few usable rows: the org is served the shared champion
        say(f"no adapter: {e}")
        return {"trained": False, "reason": str(e)}
    label = f"{trained.candidate}@{org}"
    trained_s = time.monotonic() - t
    verdict = gate.decide(registry, label, shared, None, org=org)
    promoted = verdict["decision"] == "promote"
    if promoted:
        promote(registry.for_org(org), trained.candidate, work / "promotion.lock")
    p = verdict["vs_champion"][PRIMARY]
    say(f"{verdict['decision']} {label} against v{shared} on the org's gate users: {PRIMARY} {pp(p)} "
        f"({', '.join(verdict['reasons']) or 'all checks passed'}; trained in {trained_s:.0f}s)")
    return {"trained": True, "candidate": label, "rows": trained.counts.get("kept_on_policy", 0)
            + trained.counts.get("kept_stale", 0), "decision": verdict["decision"], "reasons": verdict["reasons"],
            "gate": p, "promoted": promoted, "train_seconds": round(trained_s, 1)}


def compare(shared: pl.DataFrame, specialized: pl.DataFrame, orgs: list[str], alpha: float = 0.05) -> dict:
    """Specialized - shared on edit persistence per org (the two policies' unit sums on the same users, paired by
    user) and pooled over the orgs (inverse-variance, `pipelines.metrics.by_org.pooled_change`); `orgs_won`: the
    orgs whose change is above zero."""
    from infra.offline_ab import paired_units_difference
    from pipelines.metrics.by_org import pooled_change, wins

    by_org = {org: paired_units_difference(shared.filter(pl.col("org_id") == org),
                                           specialized.filter(pl.col("org_id") == org), PRIMARY, alpha)
              for org in orgs}
    known = [(c["diff"], c["se"] ** 2) for c in by_org.values() if c["diff"] is not None and c["se"]]
    return {"by_org": by_org, "pooled": pooled_change(known, alpha),
            "orgs_won": wins({"orgs": by_org})}

