"""Sizing the demo's later cycles to its time budget (`demo.budget_s`, docs/orchestrator.md).

The demo's settings (its overlay: `trainer.max_rows` rows, `gate.tasks.samples_per_task` samples per task) fit its time
budget on the machine they were sized on; on a machine half as fast the same cycles take about twice as long. So
before each cycle after the first, the demo measures what a cycle costs on this machine, from the cycles done so
far, and gives the next cycle its share of the time left:

    costs = cycle_costs(records, cfg.gate.tasks.samples_per_task, control, champion)   # None before a cycle is done
    plan = plan_cycle(costs, time_left_s, cycles_left, cfg, tail=True)           # cfg: the demo's config
    plan.settings()                                    # -> ["trainer.max_rows=512", "gate.tasks.samples_per_task=2"]

The share is (time left - the A/B tail's measurement - the stop) / cycles left. The tail's measurement is the
longest of the cycles' own with a margin (TAIL_MARGIN): it covers the whole last cycle's traffic. What a cycle
costs: its fixed part (everything but the optimizer steps and the gate's episodes, as the last cycle took: collect,
distill, validate, measure, the trainer's start and save, the gate's staging and report, promote, deploy and the run
around them), the optimizer steps in proportion to the rows (the slowest rate seen so far, with a margin) and the
gate's episodes in proportion to its samples per task (the candidate's arm alone: the champion's episodes are kept
from an earlier gate). Once a promotion has split the arms onto two checkpoints, a gate measured before it is scaled
up (SPLIT_ARMS_GATE): the arms then run two engines, and the gate's engine gets less of the machine. The plan keeps
the demo's settings when they fit; otherwise it trains fewer rows (down to `demo.train_min_rows`), then runs fewer
gate samples (down to `demo.gate_min_samples`, with rows down to one step); when not even that fits, it runs the
smallest cycle and says so. Samples never grow from one cycle to the next (the champion's kept episodes cover the
earlier count).

The first cycle always runs with the demo's settings: it trains v0, and most of the A/B lead comes from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.config import render_overrides
from infra.orchestrator.ledger import CycleRecord
from infra.orchestrator.summary import rows_trained

STOP_S = 25.0          # wall seconds from the last measurement to the end: the A/B summary and stopping the stack
RATE_MARGIN = 1.15     # training's seconds per row vary by a few tens of percent between cycles
SPLIT_ARMS_GATE = 1.7  # a gate's episodes take 1.7-1.8x as long once the arms serve two checkpoints (an engine
                       # each on the arms' core) as while one engine serves both
TAIL_MARGIN = 1.5      # the A/B tail measures the whole last cycle's traffic, a cycle's range the time since the one
                       # before: 20-42 s against 13-27 s for the cycles' own


@dataclass(frozen=True)
class Costs:
    fixed_s: float             # a cycle's wall seconds besides the optimizer steps and the gate's episodes
    train_s_per_row: float     # optimizer-step seconds per row trained (the slowest cycle so far, with RATE_MARGIN)
    gate_s_per_sample: float   # the gate's episode seconds per sample per task, for the candidate's arm alone
    measure_s: float           # collect + distill + validate + measure, the longest so far (the A/B tail's: more)
    samples: int               # samples per task of the last gate (the next one runs no more)


def _seconds(rec: CycleRecord, *steps: str) -> float:
    return sum(float(rec.steps.get(s, {}).get("seconds") or 0.0) for s in steps)


def _loop_s(rec: CycleRecord) -> float:
    """The optimizer steps' seconds (the whole train step for a record from before the trainer reported them)."""
    return float(rec.result("train").get("loop_seconds") or 0.0) or _seconds(rec, "train")


def _episodes_s(rec: CycleRecord) -> float:
    """The gate's episode seconds (the whole evaluate step for a record without the gate's timings)."""
    return float((rec.result("evaluate").get("seconds") or {}).get("arms") or 0.0) or _seconds(rec, "evaluate")


def _arms_split(rec: CycleRecord, control: str) -> bool:
    """Whether the arms served two checkpoints while `rec` ran (its champion, the treatment arm's, was not
    control's): serving then runs an engine per arm on the arms' cores, and the gate's engine gets less."""
    return str(rec.result("collect").get("champion")) != control


def cycle_costs(records: list[CycleRecord], default_samples: int, control: str | None = None,
                champion: str | None = None) -> Costs | None:
    """What a cycle costs here now, from the finished cycles that trained and ran a gate (None: none yet).
    `default_samples`: the samples per task of a gate whose result does not say (recorded before it did).
    `control`, `champion`: the versions the arms serve now; when they differ and the last gate ran while one
    checkpoint served both arms, its episodes are expected to take SPLIT_ARMS_GATE times as long."""
    done = [r for r in records if r.finished_wall and r.done("train") and r.done("evaluate")
            and (rows_trained(r) or 0) > 0 and not r.result("evaluate").get("reused")]
    if not done:
        return None
    last = done[-1]
    wall = last.finished_wall - last.started_wall
    rate = max(_loop_s(r) / rows_trained(r) for r in done) * RATE_MARGIN
    arms = max(1, len(last.result("evaluate").get("arms_run") or ["candidate"]))
    samples = int(last.result("evaluate").get("samples_per_task") or default_samples)
    split_now = control is not None and champion is not None and str(champion) != str(control)
    slower = SPLIT_ARMS_GATE if split_now and not _arms_split(last, str(control)) else 1.0
    return Costs(fixed_s=max(0.0, wall - _loop_s(last) - _episodes_s(last)), train_s_per_row=rate,
                 gate_s_per_sample=_episodes_s(last) / (samples * arms) * slower,
                 measure_s=max(_seconds(r, "collect", "distill", "validate", "measure") for r in done),
                 samples=samples)


@dataclass(frozen=True)
class Plan:
    train_max_rows: int
    gate_samples: int
    share_s: float             # this cycle's share of the time left
    estimate_s: float          # what the plan is expected to take
    fits: bool
    reduced: bool              # not the demo's own settings

    def settings(self) -> list[str]:
        return render_overrides({"trainer.max_rows": self.train_max_rows,
                                 "gate.tasks.samples_per_task": self.gate_samples})

    def text(self) -> str:
        what = (f"at most {self.train_max_rows} rows, {self.gate_samples} gate samples per task: "
                f"~{self.estimate_s:.0f}s of a {self.share_s:.0f}s share of the time left")
        if not self.reduced:
            return f"the demo's settings ({what})"
        return f"sized to the budget ({what})" if self.fits else f"the smallest cycle, over the budget ({what})"


def plan_cycle(costs: Costs, time_left_s: float, cycles_left: int, cfg, tail: bool = True) -> Plan:
    """The next cycle's rows and gate samples (see the module doc). `cfg`: the demo's config, whose
    trainer.max_rows and gate.tasks.samples_per_task are the demo's settings, with trainer.rows_per_step and the floors
    demo.train_min_rows and demo.gate_min_samples."""
    demo, rows_per_step, demo_samples = cfg.demo, cfg.trainer.rows_per_step, cfg.gate.tasks.samples_per_task
    reserve = STOP_S + (costs.measure_s * TAIL_MARGIN if tail else 0.0)
    share = (time_left_s - reserve) / max(1, cycles_left)
    top_rows, top_samples = cfg.trainer.max_rows, min(demo_samples, costs.samples)
    least_samples = min(demo.gate_min_samples, top_samples)

    def estimate(rows: int, samples: int) -> float:
        return costs.fixed_s + rows * costs.train_s_per_row + samples * costs.gate_s_per_sample

    def plan(rows: int, samples: int, fits: bool) -> Plan:
        return Plan(rows, samples, share, estimate(rows, samples), fits,
                    reduced=(rows, samples) != (top_rows, demo_samples))

    def rows_tried(samples: int):
        if top_rows <= 0:       # all of a cycle's rows: only the gate can be sized
            return [top_rows]
        floor = rows_per_step if samples == least_samples else min(demo.train_min_rows, top_rows)
        return range(top_rows, floor - 1, -rows_per_step)

    for s in range(top_samples, least_samples - 1, -1):
        for rows in rows_tried(s):
            if estimate(rows, s) <= share:
                return plan(rows, s, True)
    return plan(top_rows if top_rows <= 0 else min(rows_per_step, top_rows), least_samples, False)
