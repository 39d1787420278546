"""`rtrl train`: one cycle's reward rows -> a candidate checkpoint registered in MLflow.

    champion (registry alias) -> its folder; reward table rows -> `select_rows` (counts by reason);
    Trainer (setup, train with per-step metrics to MLflow and a progress line, save_checkpoint, cleanup);
    register the folder as a new version tagged candidate=true, parent=<champion>, with the data window, counts,
    reward statistics, config hash and code version in the tags and in rtrl_metadata.json.

Several ranks (`trainer.ranks`, started by trainer/launch.py): rank 0 alone creates the MLflow run, logs, writes the
checkpoint and registers the one candidate; the other ranks get the champion and the candidate version from it.

A run directory per cycle (`<state>/train/<cycle>`) holds the newest resumable step checkpoint and the candidate's
folder: rerunning a killed `rtrl train --cycle C` resumes it; a cycle whose candidate is registered is not trained
twice. The folder is removed once the candidate is registered, and a run of another cycle removes the folders of
cycles that failed for good (trainer/scratch.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from registry.shipping import shipped_of
from trainer.bootstrap.bootstrap import code_version
from trainer.config import TrainerConfig
from trainer.scratch import remove, stale_runs
from trainer.selection import select_rows

EXPERIMENT = "rtrl-training"


@dataclass
class TrainResult:
    cycle: str
    parent: str
    candidate: str | None
    counts: dict = field(default_factory=dict)
    steps: int = 0
    tokens: int = 0
    reward_mean: float = 0.0
    seconds: float = 0.0
    folder: str = ""               # where the candidate was written; removed once registered (the registry holds it)
    resumed_from_step: int = 0
    already_done: bool = False
    loop_seconds: float = 0.0      # the optimizer steps alone (seconds is from the model's load to the saved candidate)
    org: str | None = None         # an org's adapter: `candidate` is a version of the org's lineage
    shipped: dict | None = None    # how its served weights were stored (registry.shipping.shipped_of); None: not


def ancestors(registry, version: str, depth: int) -> list[str]:
    """The parent, grandparent, ... of `version` (from the `parent` tag), nearest first, at most `depth`."""
    out, current = [], version
    for _ in range(depth):
        parent = registry.info(current).tags.get("parent", "")
        if not parent:
            break
        out.append(parent)
        current = parent
    return out


def _rows_of(rows, org: str | None):
    from trainer.specialize import org_rows

    return rows if org is None else org_rows(rows, org)


def _folder_of(registry, label: str) -> Path:
    """The local folder of a version label (`<v>@<org>`: the org lineage's; plain: the shared model's)."""
    return registry.shared().local_path(label)


def _find_candidate(registry, cycle: str) -> str | None:
    for mv in registry.client.search_model_versions(f"name = '{registry.model}'"):
        if (mv.tags or {}).get("cycle") == cycle and (mv.tags or {}).get("candidate") == "true":
            return str(mv.version)
    return None


def _fingerprint(rows) -> str:
    """Which rows, in which order: the ranks must all train on the same ones."""
    return hashlib.sha256("\n".join(rows["request_id"].to_list()).encode()).hexdigest()[:16]


def run_training(cfg: TrainerConfig, registry, rewards: Path, cycle: str, run_root: Path,
                 as_of: datetime | None = None, log: Callable[[str], None] = print,
                 on_step: Callable | None = None, window: str | None = None, org: str | None = None) -> TrainResult:
    """One cycle's training. With `org`: that org's adapter (trainer/specialize.py) on that org's rows alone,
    registered in the org's lineage (`cfg` then has the adapter's LoRA settings: SpecializeConfig.trainer).
    Under a launcher (several ranks) rank 0 alone talks to MLflow: it looks up the champion,
    creates the run, logs the metrics, writes the checkpoint folder and registers the one candidate; the others get
    what they need from it (the champion, its folder, the candidate version) and return the same result. Every rank
    reads and selects the rows itself (deterministic: sorted by request_id, a seeded sample) and the ranks check
    that they agree before training."""
    from trainer.ranks import Ranks

    ranks = Ranks.start()
    ok = False
    try:
        result = _run_training(ranks, cfg, registry, rewards, cycle, run_root, as_of, log, on_step, window, org)
        ok = True
        return result
    finally:
        ranks.close(ok)


def _run_training(ranks, cfg: TrainerConfig, registry, rewards: Path, cycle: str, run_root: Path,
                  as_of: datetime | None, log: Callable[[str], None], on_step: Callable | None,
                  window: str | None, org: str | None) -> TrainResult:
    from schemas.reward_table import outcome_table, read_outcome_table, read_reward_table
    from trainer.adapters import base_of
    from trainer.adapters import lineage as adapter_tags
    from trainer.outcomes import read_chain_rows, with_outcomes
    from trainer.specialize import check_isolation, org_lookup, org_rows
    from trainer.train import Trainer

    lookup = None
    target = registry if org is None else registry.for_org(org)   # where the candidate is registered
    if org is not None and not cfg.lora_r:
        raise ValueError(f"org {org}'s adapter needs trainer.lora_r > 0 (SpecializeConfig.trainer sets it)")
    if ranks.main and org is not None:
        lookup = org_lookup(registry, org, cycle, max(cfg.staleness, cfg.outcome_staleness), _find_candidate,
                            ancestors)
    elif ranks.main:
        existing = _find_candidate(registry, cycle)
        parent, parent_dir = registry.resolve("champion")
        parent_base, base_dir = (None, None) if existing is not None else base_of(registry, parent, parent_dir)
        lookup = (existing, parent, str(parent_dir), parent_base, base_dir and str(base_dir),
                  [] if existing is not None else ancestors(registry, parent,
                                                            max(cfg.staleness, cfg.outcome_staleness)),
                  adapter_tags(registry, parent, parent_base) if cfg.lora_r and existing is None else {})
    # an adapter champion's full base checkpoint (parent_base, base_dir), and an adapter candidate's tags
    existing, parent, parent_dir, parent_base, base_dir, lineage, adapter = ranks.share(lookup)
    if org is not None:
        registry = target
    if ranks.local_main:      # the run folders of other cycles: failed for good (trainer/scratch.py)
        remove(stale_runs(run_root, cycle))
    if existing is not None:
        if ranks.local_main:  # registered by a run that stopped before it removed its folder
            remove([run_root / cycle])
        if ranks.main:
            log(f"train: cycle {cycle} already produced candidate version {existing}; nothing to do")
        return TrainResult(cycle, parent, existing, already_done=True)
    if not Path(parent_dir).is_dir():     # a rank on another machine: its own copy
        parent_dir = _folder_of(registry, parent)
    if base_dir is not None and not Path(base_dir).is_dir():
        base_dir = _folder_of(registry, parent_base)
    table = read_reward_table(rewards, window)
    if org is not None:
        table = org_rows(table, org)
    outcomes = read_outcome_table(outcome_table(rewards), window)
    rows, outcome_counts = with_outcomes(table, outcomes if org is None else org_rows(outcomes, org),
                                         lambda missing: _rows_of(read_chain_rows(rewards, missing), org),
                                         cfg.outcome_weight)
    sel = select_rows(rows, parent, lineage, cfg.staleness, cfg.min_rows, as_of,
                      max_rows=cfg.max_rows, seed=cfg.seed, train_on_cut_short=cfg.train_on_cut_short,
                      chain_staleness=cfg.outcome_staleness)
    sel.counts |= {k: v for k, v in outcome_counts.items() if v}
    if org is not None:
        check_isolation(sel.rows, org)
    ranks.same(_fingerprint(sel.rows), "the selected rows")
    if ranks.main:
        log(f"train: cycle {cycle}: champion v{parent}; {json.dumps(sel.counts)}"
            + (f"; {ranks.world} ranks" if ranks.world > 1 else ""))
    config_hash = hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()[:16]
    run_id = None
    if ranks.main:
        mlflow_run = registry.client.create_run(registry.experiment_id(EXPERIMENT),
                                                run_name=f"train-{cycle}" + (f"-{org}" if org else ""),
                                                tags={"cycle": cycle, "parent": parent, "config_hash": config_hash}
                                                | ({"org": org} if org else {}))
        run_id = mlflow_run.info.run_id
    from mlflow.entities import Metric, Param

    if ranks.main:   # one write each (a store transaction per parameter or metric costs ~0.1 s on a slow disk)
        registry.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in cfg.model_dump().items()])

    def step_hook(m):
        if ranks.main:
            now = int(time.time() * 1000)
            registry.client.log_batch(run_id, metrics=[Metric(name, float(value), now, m.step)
                                                       for name, value in asdict(m).items()
                                                       if name != "step" and value is not None])
        if on_step:
            on_step(m)

    t0 = time.perf_counter()
    trainer = Trainer(cfg, sel.rows, parent_dir, run_root / cycle, on_step=step_hook, base_dir=base_dir)
    try:
        trainer.setup()
        summary = trainer.train()
        rewards_col = sel.rows["reward"]
        metadata = {"parent_version": parent, "cycle": cycle, "data": str(rewards), "as_of": as_of,
                    "counts": sel.counts, "reward_mean": float(rewards_col.mean()),
                    "reward_std": float(rewards_col.std() or 0.0), "steps": summary.steps, "tokens": summary.tokens,
                    "inert_rows": summary.inert_rows, "frozen_parameters": summary.frozen_parameters,
                    "config_hash": config_hash, "code_version": code_version(), "train_run": run_id,
                    "ranks": ranks.world} | adapter
        folder = trainer.save_checkpoint(metadata)      # every rank (ZeRO-3 and 16-bit masters gather); rank 0 writes
        candidate = shipped = None
        if ranks.main:
            candidate = registry.register(folder, tags={"candidate": "true", "parent": parent, "cycle": cycle,
                                                        "train_run": run_id,
                                                        "reward_mean": f"{metadata['reward_mean']:.6f}",
                                                        "rows": str(sel.rows.height), "config_hash": config_hash,
                                                        "code_version": metadata["code_version"]} | adapter,
                                          run_name=f"candidate-{cycle}" + (f"-{org}" if org else ""), log=log)
            registry.client.set_terminated(run_id, "FINISHED")
            shipped = shipped_of(registry.info(candidate).tags)
        candidate, shipped = ranks.share((candidate, shipped))
    except BaseException:
        if ranks.main:
            registry.client.set_terminated(run_id, "FAILED")
        raise
    finally:
        trainer.close()
    if ranks.local_main:      # every rank is past the registration (`share` above)
        trainer.cleanup()
    return TrainResult(cycle, parent, candidate, sel.counts, summary.steps, summary.tokens,
                       float(sel.rows["reward"].mean()), time.perf_counter() - t0, str(folder),
                       summary.resumed_from_step, loop_seconds=summary.seconds, org=org, shipped=shipped)
