"""One lineage of the learning loop in one process: N cycles from v0, each champion scored against v0.

    lineage = run_lineage(cfg, v0_folder, seed=0, cycles=6, work=Path("/tmp/lineage-0"), log=print)

A cycle is production's cycle run by the in-process executor (infra.orchestrator.steps.run_cycle: collect, distill,
validate, measure, train, evaluate, promote, specialize, deploy, the same step functions the Dagster job runs), on
the lineage's own config (`lineage_config`: its state dir under `work`, so its own registry, reward table and
ledger). Two things differ from a live cycle, and the docs say so where figures are published:
  traffic   instead of the Kafka range since the last cycle, the champion serves `learning.train_users` new
            simulated users for `learning.cycle_hours` simulated hours in this process (`infra.offline_cycle`:
            sampled with serving's max tokens and temperature, a thread per user, answered in lockstep batches),
            drained (every request mature, every background task judged), and their events are the cycle's traffic
            file (`orchestrator.source = "files"`): the same parse, join and sink as a Kafka cycle, no carry
  deploy    nothing to deploy to: no serving runs
Then `score`: a newly promoted champion serves the seed's fixed scoring users; its metrics against v0's on the
same users are the learning curve's points (`infra.learning.score`).
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
    gate: dict = field(default_factory=dict)    # the evaluate step's result: the decision and every suite's
    score: dict = field(default_factory=dict)   # the champion after the cycle against v0 (infra.learning.score)
    suite: dict | None = None           # the champion after the cycle on the held-out suite (infra.learning.suite)
    seconds: dict = field(default_factory=dict)
    dropped: dict = field(default_factory=dict)  # rows the training selection left out, by reason


def lineage_config(cfg, work: Path, seed: int):
    """The config a lineage's cycles run with: `cfg` with the state dir `work` (the lineage's own MLflow registry,
    reward table, ledger and traffic files), traffic from files, the trainer's and the users suite's seeds offset by
    the lineage's `seed`; the gate's generated suites stay where `cfg` keeps them (made once, v0's episodes kept)."""
    from evals.gate_run import suites_root

    g = cfg.gate
    return cfg.model_copy(update={
        "state_dir": str(work), "rewards_dir": "",
        "mlflow": cfg.mlflow.model_copy(update={"tracking_uri": "", "artifact_root": "", "promotion_lock": ""}),
        "orchestrator": cfg.orchestrator.model_copy(update={"source": "files", "traffic_dir": "", "ledger": ""}),
        "trainer": cfg.trainer.model_copy(update={"seed": cfg.trainer.seed + seed}),
        "gate": g.model_copy(update={
            "users": g.users.model_copy(update={"seed": g.users.seed + seed}),
            "tasks": g.tasks.model_copy(update={"suites_root": str(suites_root(cfg)), "via_serving": False})})})


def lineage_registry(cfg, v0: Path):
    """The lineage's MLflow registry (`lineage_config`'s, under its work folder) with v0 registered as version 1, aliases
    champion and control."""
    from registry.client import Registry

    reg = Registry.from_config(cfg)
    if reg.version_of("champion") is None:
        version = reg.register(v0, tags={"bootstrap": "true"}, run_name="v0")
        reg.set_alias("champion", version)
        reg.set_alias("control", version)
    return reg


def run_lineage(cfg, v0: Path, seed: int, cycles: int, work: Path, log: Callable[[str], None] = lambda m: None,
                workers=None, scorer: Scorer | None = None) -> dict:
    """`cycles` cycles of one lineage (seeded by `seed`: traffic populations, sampling, the trainer, the gate's and
    the scoring users). Returns {"seed", "v0": v0's scoring metrics, "cycles": [CycleResult as dict, ...]}; each
    cycle is also written to `work`/cycles.jsonl as it ends. Every serving run of the lineage shares one set of
    worker processes (`workers`, else its own). A caller that goes on from the lineage passes its own `scorer` and
    finds every checkpoint's units in it."""
    from infra.offline_cycle import ServingWorkers

    if workers is None:
        with ServingWorkers(cfg.learning.serving_jobs()) as own:
            return _run_lineage(cfg, v0, seed, cycles, work, log, own, scorer)
    return _run_lineage(cfg, v0, seed, cycles, work, log, workers, scorer)


def serve_cycle(lcfg, registry, cycle_id: str, sim, hours: float, seed: int, workers) -> dict:
    """The champion serves `sim` for `hours` in this process; its events become the cycle's traffic file."""
    from infra.learning.score import sampling_of
    from infra.offline_cycle import serve
    from infra.orchestrator.steps import traffic_file
    from pipelines.rewards.files_job import write_traffic

    champion, folder = registry.resolve("champion")
    served = serve(folder, champion, sim, hours, seed, jobs=workers, **sampling_of(lcfg))
    events = write_traffic(traffic_file(lcfg, cycle_id), served.events)
    return {"champion": champion, "requests": served.requests, "batches": served.batches, "events": events}


def run_one_cycle(lcfg, cycle_id: str, log: Callable[[str], None]):
    """The cycle by the in-process executor; its ledger record (blocked when the rows could not train)."""
    from datetime import datetime, timezone

    from infra.orchestrator.steps import CycleBlocked, context_for, run_cycle

    ctx, ledger = context_for(lcfg, cycle_id, datetime.now(timezone.utc), log=log)
    try:
        return run_cycle(ctx, ledger)
    except CycleBlocked:
        return ledger.load(cycle_id)


def _run_lineage(cfg, v0: Path, seed: int, cycles: int, work: Path, log: Callable[[str], None], workers,
                 scorer: Scorer | None) -> dict:
    import torch

    lc = cfg.learning
    if lc.threads:
        torch.set_num_threads(lc.threads)
    work.mkdir(parents=True, exist_ok=True)
    lcfg = lineage_config(cfg, work, seed)
    registry = lineage_registry(lcfg, v0)
    scorer = scorer or Scorer(cfg, seed, log, workers=workers)
    t0 = time.monotonic()
    base = scorer.score(v0, registry.version_of("control"))["summary"] if lc.score_v0 else {}
    suite = _suite(cfg, v0, registry.version_of("control"), log)
    if base or suite:
        scored = f"scored on {lc.score_users} users: {base}" if base else "not scored on the scoring users"
        log(f"[seed {seed}] v0 {scored}; suite {suite} ({time.monotonic() - t0:.0f}s)")
    out = {"seed": seed, "v0": {**base, "suite": suite}, "cycles": []}
    ledger = work / "cycles.jsonl"
    ledger.write_text("")
    for c in range(1, cycles + 1):
        cid = f"c{c}"
        t = time.monotonic()
        sim = cfg.simulator.model_copy(update={"users": lc.train_users, "seed": lc.traffic_seed + 1000 * seed + c})
        served = serve_cycle(lcfg, registry, cid, sim, lc.cycle_hours, 1000 * seed + c, workers)
        traffic_s = time.monotonic() - t
        log(f"[seed {seed} {cid}] v{served['champion']} served {served['requests']} requests in "
            f"{served['batches']} batches: {served['events']} events ({traffic_s:.0f}s)")
        rec = run_one_cycle(lcfg, cid, lambda m: log(f"[seed {seed}] {m}"))
        result = cycle_result(c, served["champion"], rec, registry)
        result.seconds = {"traffic": round(traffic_s, 1), **{k: round(v.get("seconds", 0.0), 1)
                                                             for k, v in rec.steps.items()}}
        if result.champion != served["champion"]:
            t = time.monotonic()
            now_folder = registry.resolve("champion")[1]
            result.score = scorer.score(now_folder, result.champion).get("vs_v0", {})
            suite = _suite(cfg, now_folder, result.champion, log)
            result.seconds["score"] = round(time.monotonic() - t, 1)
        result.suite = suite
        log(f"[seed {seed} {cid}] {result.decision} v{result.candidate} "
            f"({', '.join(result.reasons) or 'all checks passed'}); champion v{result.champion}"
            + (f": persistence vs v0 {pp(result.score['edit_persistence_rate'])}" if result.score else ""))
        out["cycles"].append(_record(ledger, result))
    promoted = [c["champion"] for c in out["cycles"] if c["score"]]
    if len(set(promoted)) >= 2:
        out["last_vs_first"] = {"first": promoted[0], "last": promoted[-1],
                                **scorer.compare(promoted[0], promoted[-1])}
    return out


def cycle_result(c: int, champion_before: str, rec, registry) -> CycleResult:
    """What the curve keeps of a cycle's ledger record: the rows, the rows trained and those dropped by reason, the
    gate's decision with every suite's, the champion after it."""
    distill, train = rec.result("distill"), rec.result("train")
    counts = train.get("counts") or {}
    if not rec.done("train"):                   # blocked: the rows could not train (too few usable, immature)
        return CycleResult(c, champion_before, None, "no_candidate", [rec.error], distill.get("rows", 0), 0, None,
                           registry.version_of("champion"), dropped=dropped_rows(counts))
    gate = rec.result("evaluate")
    return CycleResult(c, champion_before, train.get("candidate"), gate.get("decision", "?"),
                       list(gate.get("reasons") or []), distill.get("rows", 0),
                       trained_rows(counts), train.get("reward_mean"),
                       registry.version_of("champion"), gate, dropped=dropped_rows(counts))


def trained_rows(counts: dict) -> int:
    """The rows the training selection kept: on-policy, and within the staleness bound."""
    return counts.get("kept_on_policy", 0) + counts.get("kept_stale", 0)


def dropped_rows(counts: dict) -> dict:
    """The rows selection left out, by reason (trainer.selection's counts that are not kept)."""
    return {k.removeprefix("dropped_"): v for k, v in counts.items() if k.startswith("dropped_") and v}


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
