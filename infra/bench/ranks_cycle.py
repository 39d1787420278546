"""The work of `rtrl bench ranks` (infra/bench/ranks.py): one cycle's training step on N CPU ranks (torchrun, gloo)
at a ZeRO stage, against the same global batch on one rank.

A tiny random Llama (serving.testing) is registered as the champion of a private MLflow store (SQLite in a
temporary state dir); a reward table of a few rows is written; then `rtrl train` runs as the cycle's step does, once
with `--ranks 1` (ZeRO-1, the reference) and once with `--ranks N` at the stage asked. The N-rank run must register
exactly one candidate and print one summary, and its checkpoint (written by rank 0; gathered from the shards at
ZeRO-3) must hold the reference's weights within TOLERANCE and, reloaded in transformers, give its logits. AdamW's
first step is nearly blind to the gradient's scale (m / sqrt(v)), so the step's logged loss and gradient norm are
compared too: they show that the ranks' gradients add up to the one rank's.

    setup = prepare(folder)
    one, many = train_cycle(setup, "one", 1, 1, log), train_cycle(setup, "c2", 2, 3, log)
    result, ok = verdict(one, many, folder / "v1")

tests/integration/test_train_ranks.py runs these too.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

TOLERANCE = 1e-6             # largest absolute weight difference allowed against the one-rank run (fp32)
LOGITS_TOLERANCE = 1e-5      # reloaded logits against the one-rank checkpoint's
METRIC_TOLERANCE = 1e-5      # relative difference of the step's loss and gradient norm
ROWS = 8


@dataclass
class Setup:
    root: Path
    table: Path
    overrides: list[str]


@dataclass
class CycleRun:
    cycle: str
    ranks: int
    zero_stage: int
    summary: dict
    summary_lines: int           # JSON summaries on the launcher's stdout: rank 0's alone
    seconds: float
    folder: Path
    candidates_registered: int
    loss: float
    grad_norm: float


def _overrides(root: Path) -> list[str]:
    return [f"state_dir={root / 'state'}", "trainer.micro_batch=2", f"trainer.rows_per_step={ROWS}",
            f"trainer.min_rows={ROWS}", "trainer.max_tokens=8", "serving.max_tokens=8", "trainer.lr=0.001",
            "trainer.negative_weight=1.0", "trainer.old_logprobs=\"parent\"", "trainer.threads=1", "trainer.seed=0"]


def prepare(root: Path, rows: int = ROWS) -> Setup:
    """The champion (a tiny random Llama, version 1) in the private store, and `rows` reward rows it served."""
    import random
    from datetime import datetime, timezone

    import polars as pl

    from infra.config import load_config
    from registry.client import Registry
    from serving.testing import make_tiny_checkpoint

    overrides = _overrides(root)
    registry = Registry.from_config(load_config(None, overrides))
    v1 = registry.register(make_tiny_checkpoint(root / "v1", seed=0, hidden=32, layers=2, heads=2,
                                                max_positions=64), tags={"parent": ""})
    registry.set_alias("champion", v1)
    rnd = random.Random(0)
    data = []
    for i in range(rows):
        completion = [rnd.randrange(10, 500) for _ in range(rnd.randint(2, 6))]
        data.append({"request_id": f"r{i:04d}", "policy_version": v1,
                     "prompt_token_ids": [rnd.randrange(10, 500) for _ in range(rnd.randint(3, 8))],
                     "completion_token_ids": completion, "behaviour_logprobs": [-6.0] * len(completion),
                     "reward": float(i % 3 == 0) - 0.5, "response_kind": "edit",
                     "mature_time": datetime(2026, 11, 1, tzinfo=timezone.utc)})
    table = root / "rewards" / "window=c" / "part-0.parquet"
    table.parent.mkdir(parents=True)
    pl.DataFrame(data).write_parquet(table)
    return Setup(root, root / "rewards", overrides)


def train_cycle(setup: Setup, cycle: str, ranks: int, zero_stage: int, log: Callable[[str], None],
                timeout_s: float = 600) -> CycleRun:
    """`rtrl train --cycle CYCLE --ranks RANKS` as a subprocess (stderr to log), its summary, the versions
    registered for the cycle, the step's logged loss and gradient norm."""
    import json

    from infra.argv import rtrl_argv
    from infra.config import load_config
    from registry.client import Registry

    argv = rtrl_argv("train", "--cycle", cycle, "--rewards", str(setup.table), "--ranks", str(ranks),
                     overrides=[*setup.overrides, f"trainer.zero_stage={zero_stage}"])
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env={**os.environ})
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"`rtrl train --cycle {cycle} --ranks {ranks}` exited {proc.returncode}:\n"
                           f"{proc.stderr[-4000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    summary = json.loads(lines[-1])["train"]
    log(f"[ranks] {cycle}: {ranks} rank(s), ZeRO-{zero_stage}: version {summary['candidate']} in {seconds:.1f}s"
        f" ({len(lines)} summary line(s) on stdout)")
    registry = Registry.from_config(load_config(None, setup.overrides))
    registered = [mv for mv in registry.client.search_model_versions(f"name = '{registry.model}'")
                  if (mv.tags or {}).get("cycle") == cycle]
    run_id = registry.info(summary["candidate"]).tags["train_run"]
    metrics = registry.client.get_run(run_id).data.metrics
    return CycleRun(cycle, ranks, zero_stage, summary, len(lines), seconds, registry.local_path(summary["candidate"]),
                    len(registered), metrics["loss"], metrics["grad_norm"])


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def compare(reference: Path, other: Path, parent: Path | None = None) -> dict:
    """Largest weight difference of `other`'s checkpoint from `reference`'s (and from `parent`'s: the step moved
    them), the dtype saved, and whether both reload in transformers with the same logits on fixed inputs."""
    import torch
    from transformers import AutoModelForCausalLM

    ref, got = _weights(reference), _weights(other)
    if set(ref) != set(got):
        raise AssertionError(f"the checkpoints hold different tensors: {sorted(set(ref) ^ set(got))}")
    diff = max(float((ref[k] - got[k]).abs().max()) for k in ref)
    out = {"max_abs_weight_diff_vs_one_rank": diff, "saved_dtype": str(next(iter(got.values())).dtype)}
    if parent is not None:
        start = _weights(parent)
        out["max_abs_weight_change"] = max(float((start[k] - got[k]).abs().max()) for k in start)
    models = [AutoModelForCausalLM.from_pretrained(f, dtype=torch.float32).eval() for f in (reference, other)]
    ids = torch.randint(10, 500, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = [m(input_ids=ids).logits for m in models]
    out["max_abs_logit_diff"] = float((logits[0] - logits[1]).abs().max())
    out["reloaded_logits_match"] = out["max_abs_logit_diff"] <= LOGITS_TOLERANCE
    return out


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def verdict(one: CycleRun, many: CycleRun, parent: Path) -> tuple[dict, bool]:
    """The benchmark's fields for `many` against the one-rank `one`, and whether every check holds."""
    cmp = compare(one.folder, many.folder, parent)
    result = {"ranks": many.ranks, "zero_stage": many.zero_stage, "candidates_registered": many.candidates_registered,
              "summary_lines": many.summary_lines,
              **cmp, "tolerance": TOLERANCE, "loss_rel_diff": _relative(one.loss, many.loss),
              "grad_norm_rel_diff": _relative(one.grad_norm, many.grad_norm), "metric_tolerance": METRIC_TOLERANCE,
              "one_rank_seconds": round(one.seconds, 1), "ranks_seconds": round(many.seconds, 1)}
    ok = (many.candidates_registered == 1 and many.summary_lines == 1
          and cmp["max_abs_weight_diff_vs_one_rank"] <= TOLERANCE and cmp["reloaded_logits_match"] and cmp["max_abs_weight_change"] > 100 * TOLERANCE
          and result["loss_rel_diff"] <= METRIC_TOLERANCE and result["grad_norm_rel_diff"] <= METRIC_TOLERANCE)
    return result, ok
