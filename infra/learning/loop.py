"""One lineage of the learning loop in one process: N cycles from v0, each champion scored against v0.

    lineage = run_lineage(cfg, v0_folder, seed=0, cycles=6, work=Path("/tmp/lineage-0"), log=print)

A cycle is production's steps without the processes (each the code production runs):
  traffic   the champion serves `learning.train_users` new simulated users for `learning.cycle_hours` simulated
            hours (`infra.offline_cycle`: sampled like serving, a thread per user, answered in lockstep batches)
  rewards   the reward job's computation (`assemble_rewards`) -> the cycle's partition of a reward table; with
            background tasks on, `assemble_outcomes` -> the cycle's partition of its task-outcome table, so their
            chains train on their outcome as the cycle's do (`trainer.outcomes`)
  train     `rtrl train`'s job (`trainer.run.run_training`: on-policy selection, the trainer, a candidate
            registered in this lineage's own MLflow registry with its parent and cycle)
  gate      `infra.learning.gate`: the candidate against the champion and against the anchor (v0) on held-out
            users; its decision is tagged on the version as `rtrl gate` tags it
  promote   `registry.promotion.promote`: the compare-and-swap of alias champion
  score     a newly promoted champion serves the seed's fixed scoring users; its metrics against v0's on the same
            users are the learning curve's points (`infra.learning.score`)
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import polars as pl

from infra.learning.score import Scorer


@dataclass
class CycleResult:
    cycle: int
    champion_before: str
    candidate: str | None
    decision: str
    reasons: list[str]
    rows: int
    trained_rows: int
    reward_mean: float | None
    champion: str                       # after the cycle
    gate: dict = field(default_factory=dict)
    score: dict = field(default_factory=dict)   # the champion after the cycle against v0 (infra.learning.score)
    suite: dict | None = None           # the champion after the cycle on the held-out suite (infra.learning.suite)
    seconds: dict = field(default_factory=dict)


def traffic_rows(folder: Path, version: str, sim, spec, hours: float, seed: int,
                 jobs) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """The reward rows and the task-outcome rows of `folder` (registered as `version`) serving the population `sim`
    for `hours` (the run drains: every background task started has its outcome)."""
    from infra.offline_cycle import rewards_and_outcomes, serve

    served = serve(folder, version, sim, hours, seed, jobs=jobs)
    rows, outcomes = rewards_and_outcomes(served.events, spec)
    return rows, outcomes, {"requests": served.requests, "batches": served.batches}


def _write_partition(rows: pl.DataFrame, table: Path, version: str, window: str) -> None:
    """`rows` as the cycle's partition of `table`, laid out as the reward job's sink lays it out."""
    part = Path(table) / f"policy_version={version}" / f"window={window}"
    part.mkdir(parents=True, exist_ok=True)
    rows.write_parquet(part / "part-0.parquet")


def lineage_registry(cfg, work: Path, v0: Path):
    """A fresh MLflow registry under `work` with v0 registered as version 1, aliases champion and control."""
    from registry.client import Registry

    reg = Registry(f"sqlite:///{work / 'mlflow.db'}", work / "mlflow-artifacts", cfg.mlflow.registered_model,
                   work / "checkpoints")
    if reg.version_of("champion") is None:
        version = reg.register(v0, tags={"bootstrap": "true"}, run_name="v0")
        reg.set_alias("champion", version)
        reg.set_alias("control", version)
    return reg


def run_lineage(cfg, v0: Path, seed: int, cycles: int, work: Path, log: Callable[[str], None] = lambda m: None,
                workers=None, scorer: Scorer | None = None, gate=None) -> dict:
    """`cycles` cycles of one lineage (seeded by `seed`: traffic populations, sampling, the trainer, the scoring
    users). Returns {"seed", "v0": v0's scoring metrics, "cycles": [CycleResult as dict, ...]}; each cycle is also
    written to `work`/cycles.jsonl as it ends. Every serving run of the lineage shares one set of worker
    processes (`workers`, else its own). A caller that goes on from the lineage passes its own `scorer` and `gate`
    (`infra.learning.gate.UsersGate`) and finds every checkpoint's units in them."""
    from infra.offline_cycle import ServingWorkers

    if workers is None:
        with ServingWorkers(cfg.learning.serving_jobs()) as own:
            return _run_lineage(cfg, v0, seed, cycles, work, log, own, scorer, gate)
    return _run_lineage(cfg, v0, seed, cycles, work, log, workers, scorer, gate)


def _run_lineage(cfg, v0: Path, seed: int, cycles: int, work: Path, log: Callable[[str], None], workers,
                 scorer: Scorer | None, gate) -> dict:
    import torch

    from infra.learning.gate import UsersGate
    from registry.promotion import promote
    from schemas.reward_table import outcome_table
    from trainer.run import run_training
    from trainer.selection import SelectionError

    lc = cfg.learning
    if lc.threads:
        torch.set_num_threads(lc.threads)
    work.mkdir(parents=True, exist_ok=True)
    registry = lineage_registry(cfg, work, v0)
    anchor = registry.version_of("control")
    trainer_cfg = cfg.trainer.model_copy(update={"seed": cfg.trainer.seed + seed})
    scorer = scorer or Scorer(cfg, seed, log, workers=workers)
    gate = gate or UsersGate(cfg, seed, work / "merged", log, workers=workers)
    t0 = time.monotonic()
    base = scorer.score(v0, anchor)["summary"] if lc.score_v0 else {}
    suite = _suite(cfg, v0, anchor, log)
    if base or suite:
        scored = f"scored on {lc.score_users} users: {base}" if base else "not scored on the scoring users"
        log(f"[seed {seed}] v0 {scored}; suite {suite} ({time.monotonic() - t0:.0f}s)")
    out = {"seed": seed, "v0": {**base, "suite": suite}, "cycles": []}
    ledger = work / "cycles.jsonl"
    ledger.write_text("")
    for c in range(1, cycles + 1):
        seconds: dict[str, float] = {}
        champion, folder = registry.resolve("champion")
        t = time.monotonic()
        sim = cfg.simulator.model_copy(update={"users": lc.train_users, "seed": lc.traffic_seed + 1000 * seed + c})
        rows, outcomes, served = traffic_rows(folder, champion, sim, cfg.rewards, lc.cycle_hours,
                                              1000 * seed + c, workers)
        _write_partition(rows, work / "rewards", champion, f"c{c}")
        if not outcomes.is_empty():     # background tasks: their chains train on the outcome (trainer.outcomes)
            _write_partition(outcomes, outcome_table(work / "rewards"), champion, f"c{c}")
        seconds["traffic"] = time.monotonic() - t
        log(f"[seed {seed} c{c}] v{champion} served {served['requests']} requests in {served['batches']} batches: "
            f"{rows.height} reward rows, mean reward {rows['reward'].mean():.3f}"
            + (f", {outcomes.height} task-outcome rows" if not outcomes.is_empty() else "")
            + f" ({seconds['traffic']:.0f}s)")
        t = time.monotonic()
        try:
            trained = run_training(trainer_cfg, registry, work / "rewards", f"c{c}", work / "train",
                                   log=lambda m: log(f"[seed {seed} c{c}] {m}"), window=f"c{c}")
        except SelectionError as e:
            log(f"[seed {seed} c{c}] no candidate: {e}")
            result = CycleResult(c, champion, None, "no_candidate", [str(e)], rows.height, 0, None, champion,
                                 suite=suite)
            out["cycles"].append(_record(ledger, result))
            continue
        seconds["train"] = time.monotonic() - t
        candidate = trained.candidate
        t = time.monotonic()
        verdict = gate.decide(registry, candidate, champion, anchor)
        seconds["gate"] = time.monotonic() - t
        decision = verdict["decision"]
        if decision == "promote":
            promote(registry, candidate, work / "promotion.lock")
        now, now_folder = registry.resolve("champion")
        score = {}
        if now != champion:
            t = time.monotonic()
            score = scorer.score(now_folder, now)
            suite = _suite(cfg, now_folder, now, log)
            seconds["score"] = time.monotonic() - t
        result = CycleResult(c, champion, candidate, decision, verdict["reasons"], rows.height,
                             trained.counts.get("kept_on_policy", 0) + trained.counts.get("kept_stale", 0),
                             trained.reward_mean, now, verdict, score.get("vs_v0", {}), suite,
                             {k: round(v, 1) for k, v in seconds.items()})
        log(f"[seed {seed} c{c}] {decision} v{candidate} ({', '.join(verdict['reasons']) or 'all checks passed'}); "
            f"champion v{now}" + (f": persistence vs v0 {pp(score['vs_v0']['edit_persistence_rate'])}"
                                  if "vs_v0" in score else ""))
        out["cycles"].append(_record(ledger, result))
    promoted = [c["champion"] for c in out["cycles"] if c["score"]]
    if len(set(promoted)) >= 2:
        out["last_vs_first"] = {"first": promoted[0], "last": promoted[-1],
                                **scorer.compare(promoted[0], promoted[-1])}
    return out


def _suite(cfg, folder: Path, label: str, log: Callable[[str], None]) -> dict | None:
    """The checkpoint on the held-out gate suite (`learning.suite_samples` per task), or None when that is 0."""
    from infra.learning.suite import suite_outcomes

    if not cfg.learning.suite_samples:
        return None
    return suite_outcomes(cfg, folder, label, cfg.learning.suite_samples)


def pp(d: dict | None) -> str:
    """A difference with its interval in percentage points ("+1.2 pp [+0.3, +2.1]"), or "n/a"."""
    if not d or d.get("diff") is None:
        return "n/a"
    return f"{100 * d['diff']:+.1f} pp [{100 * d['ci_low']:+.1f}, {100 * d['ci_high']:+.1f}]"


def _record(ledger: Path, result: CycleResult) -> dict:
    from dataclasses import asdict

    d = asdict(result)
    with open(ledger, "a", encoding="utf-8") as f:
        f.write(json.dumps(d, default=str) + "\n")
    return d
