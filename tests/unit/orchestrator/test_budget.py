"""Sizing the demo's later cycles to its time budget (infra/orchestrator/budget.py): what a cycle costs is read from
the finished cycles, the demo's settings are kept when they fit the cycle's share of the time left, rows shrink
before gate samples, the smallest cycle runs (and says so) when nothing fits, and gate samples never grow."""

from __future__ import annotations

import pytest

from infra.orchestrator.budget import SPLIT_ARMS_GATE, STOP_S, TAIL_MARGIN, Costs, cycle_costs, plan_cycle
from infra.orchestrator.ledger import DONE, CycleRecord
from tests.conftest import make_config


def record(cid: str, *, wall: float, train_s: float, rows: int, gate_s: float, arms=("candidate",),
           measure_s: float = 40.0, settings=(), loop_s: float | None = None,
           episodes_s: float | None = None, samples: int | None = None, champion: str = "1") -> CycleRecord:
    steps = {"collect": {"status": DONE, "seconds": 10.0, "result": {"champion": champion}},
             "distill": {"status": DONE, "seconds": measure_s - 14.0, "result": {}},
             "validate": {"status": DONE, "seconds": 2.0, "result": {}},
             "measure": {"status": DONE, "seconds": 2.0, "result": {}},
             "train": {"status": DONE, "seconds": train_s, "result": {"counts": {"kept_on_policy": rows},
                                                                     "loop_seconds": loop_s}},
             "evaluate": {"status": DONE, "seconds": gate_s, "result": {"arms_run": list(arms),
                                                                        "seconds": {"arms": episodes_s},
                                                                        "samples_per_task": samples}},
             "promote": {"status": DONE, "seconds": 0.3, "result": {}},
             "deploy": {"status": DONE, "seconds": 2.0, "result": {}}}
    return CycleRecord(cid, int(cid[1:]), "2026-11-27T00:00:00+00:00", 1000.0, status=DONE,
                       finished_wall=1000.0 + wall, steps=steps, settings=list(settings))


def test_costs_come_from_the_finished_cycles_slowest_training_and_last_gate():
    c1 = record("c1", wall=190.0, train_s=72.0, rows=900, gate_s=64.0, measure_s=45.0)
    c2 = record("c2", wall=150.0, train_s=60.0, rows=500, gate_s=40.0, samples=2)
    samples = 4         # what a gate whose result does not say ran (the demo's setting)
    assert cycle_costs([], samples) is None
    running = CycleRecord("c1", 1, "2026-11-27T00:00:00+00:00", 1000.0)
    assert cycle_costs([running], samples) is None, "a cycle still running tells nothing yet"
    costs = cycle_costs([c1, c2], samples)
    assert costs.fixed_s == pytest.approx(150.0 - 100.0)
    assert costs.train_s_per_row == pytest.approx(60.0 / 500 * 1.15), "the slowest rate so far, with a margin"
    assert costs.gate_s_per_sample == pytest.approx(40.0 / 2) and costs.samples == 2
    assert costs.measure_s == pytest.approx(45.0), "the longest measurement so far"
    both = cycle_costs([record("c1", wall=250.0, train_s=72.0, rows=900, gate_s=128.0,
                               arms=("candidate", "champion"))], samples)
    assert both.gate_s_per_sample == pytest.approx(128.0 / 4 / 2), "a gate that ran both arms costs twice per arm"


def test_the_trainers_start_and_the_gates_staging_count_as_fixed_not_per_row_or_sample():
    # the trainer reports its optimizer steps (loop_seconds), the gate its episodes (seconds.arms)
    c1 = record("c1", wall=197.0, train_s=84.5, rows=220, gate_s=75.7, loop_s=22.0, episodes_s=70.0)
    costs = cycle_costs([c1], 4)
    assert costs.fixed_s == pytest.approx(197.0 - 22.0 - 70.0)
    assert costs.train_s_per_row == pytest.approx(22.0 / 220 * 1.15)
    assert costs.gate_s_per_sample == pytest.approx(70.0 / 4)


def test_a_gate_measured_while_one_checkpoint_served_both_arms_costs_more_once_a_promotion_split_them():
    c1 = record("c1", wall=190.0, train_s=72.0, rows=900, gate_s=40.0, champion="1")   # both arms on v1
    alike = cycle_costs([c1], 4, control="1", champion="1")
    assert alike.gate_s_per_sample == pytest.approx(40.0 / 4), "nothing promoted: the arms still share an engine"
    split = cycle_costs([c1], 4, control="1", champion="2")
    assert split.gate_s_per_sample == pytest.approx(40.0 / 4 * SPLIT_ARMS_GATE), "two engines on the arms' core now"
    assert split.fixed_s == alike.fixed_s and split.train_s_per_row == alike.train_s_per_row
    c2 = record("c2", wall=150.0, train_s=60.0, rows=500, gate_s=60.0, champion="2")   # measured with the arms split
    assert cycle_costs([c1, c2], 4, control="1", champion="3").gate_s_per_sample == pytest.approx(60.0 / 4), \
        "a gate measured with the arms split is taken as it is"
    assert cycle_costs([c1], 4).gate_s_per_sample == pytest.approx(40.0 / 4), "versions unknown: as measured"


@pytest.fixture
def demo(tmp_path):
    """The demo's config: its overlay's trainer.max_rows 1024 and rows_per_step 128, gate.tasks.samples_per_task 4;
    demo.train_min_rows 256, demo.gate_min_samples 1."""
    from infra.config import overlay_overrides
    from infra.orchestrator.demo import DEMO_CONFIG

    return make_config(tmp_path, *overlay_overrides(DEMO_CONFIG))


COSTS = Costs(fixed_s=40.0, train_s_per_row=0.05, gate_s_per_sample=10.0, measure_s=30.0, samples=4)
TAIL = 30.0 * TAIL_MARGIN   # the A/B tail's measurement: the longest cycle's, with a margin


def test_the_demos_settings_are_kept_when_they_fit_the_share_of_the_time_left(demo):
    # 2 cycles left, 400 s: share (400 - TAIL - STOP_S) / 2; the demo's cycle is 40 + 1024*0.05 + 40 = 131.2 s
    plan = plan_cycle(COSTS, 400.0, 2, demo)
    assert plan.share_s == pytest.approx((400.0 - TAIL - STOP_S) / 2)
    assert (plan.train_max_rows, plan.gate_samples, plan.fits, plan.reduced) == (1024, 4, True, False)
    assert plan.estimate_s == pytest.approx(131.2)
    assert plan.settings() == ["trainer.max_rows=1024", "gate.tasks.samples_per_task=4"]
    assert "the demo's settings" in plan.text()


def test_rows_shrink_first_then_gate_samples_then_rows_below_the_floor(demo):
    # share 100 s: at 4 samples, 40 + 40 + rows*0.05 <= 100 -> 384 rows
    plan = plan_cycle(COSTS, 2 * 100.0 + TAIL + STOP_S, 2, demo)
    assert (plan.train_max_rows, plan.gate_samples, plan.fits, plan.reduced) == (384, 4, True, True)
    # share 80 s: 4 samples leave too little for 256 rows (92.8 s), 3 samples too (82.8), 2 samples: 384 rows
    plan = plan_cycle(COSTS, 2 * 80.0 + TAIL + STOP_S, 2, demo)
    assert (plan.train_max_rows, plan.gate_samples, plan.fits) == (384, 2, True)
    # share 67 s: 2 samples leave too little for 256 rows (72.8 s); 1 sample (the least): 256 rows (62.8 s)
    plan = plan_cycle(COSTS, 67.0 + TAIL + STOP_S, 1, demo)
    assert (plan.train_max_rows, plan.gate_samples, plan.fits) == (256, 1, True)
    # share 57 s: at the fewest samples, rows down to one step: 128 rows (56.4 s)
    plan = plan_cycle(COSTS, 57.0 + TAIL + STOP_S, 1, demo)
    assert (plan.train_max_rows, plan.gate_samples, plan.fits) == (128, 1, True)
    assert "sized to the budget" in plan.text()


def test_when_nothing_fits_the_smallest_cycle_runs_and_says_it_is_over_the_budget(demo):
    plan = plan_cycle(COSTS, 50.0, 2, demo)
    assert (plan.train_max_rows, plan.gate_samples, plan.fits, plan.reduced) == (128, 1, False, True)
    assert "over the budget" in plan.text()


def test_gate_samples_never_grow_past_the_last_gates(demo):
    fewer = Costs(fixed_s=40.0, train_s_per_row=0.05, gate_s_per_sample=10.0, measure_s=30.0, samples=2)
    plan = plan_cycle(fewer, 10_000.0, 1, demo)
    assert (plan.train_max_rows, plan.gate_samples, plan.reduced) == (1024, 2, True)


def test_without_the_tail_its_measurement_is_not_reserved(demo):
    assert plan_cycle(COSTS, 400.0, 2, demo, tail=False).share_s == pytest.approx((400.0 - STOP_S) / 2)


@pytest.mark.integration      # the registry's MLflow store
def test_the_demo_keeps_its_settings_on_a_fast_machine_and_sizes_later_cycles_down_on_a_slow_one(tmp_path):
    import time

    from infra.orchestrator.demo import Demo
    from infra.orchestrator.ledger import Ledger

    demo = Demo(make_config(tmp_path), None, [], log=lambda _: None)
    ledger = Ledger(demo.state)
    assert demo.cycle_settings("c1", 3, ledger) == [], "the first cycle runs with the demo's settings"
    # the machine the demo was tuned on: cycle 1 done at ~180 s (train 35 s for 700 rows, gate 35 s)
    ledger.save(record("c1", wall=80.0, train_s=35.0, rows=700, gate_s=35.0, measure_s=20.0))
    demo.t0 = time.monotonic() - 180.0
    assert demo.cycle_settings("c2", 3, ledger) == []
    # a machine half as fast (demo V2 in the README): cycle 1 took 193 s and ended at 341 s
    ledger.save(record("c1", wall=193.0, train_s=72.0, rows=895, gate_s=63.0, measure_s=46.0))
    demo.t0 = time.monotonic() - 341.0
    settings = demo.cycle_settings("c2", 3, ledger)
    assert settings == ["trainer.max_rows=128", "gate.tasks.samples_per_task=1"], "the smallest cycle"
    c2 = record("c2", wall=120.0, train_s=15.0, rows=128, gate_s=30.0, settings=settings, samples=1)
    ledger.save(c2)
    assert cycle_costs(ledger.all(), demo.cfg.gate.tasks.samples_per_task).samples == 1, "the gate's own count"
    assert cycle_costs([ledger.load("c1")], demo.cfg.gate.tasks.samples_per_task).samples == 4, "else the demo's"
    off = Demo(make_config(tmp_path / "off"), None, ["demo.budget_s=0"], log=lambda _: None)
    Ledger(off.state).save(record("c1", wall=193.0, train_s=72.0, rows=895, gate_s=63.0))
    off.t0 = time.monotonic() - 341.0
    assert off.cycle_settings("c2", 3, Ledger(off.state)) == [], "demo.budget_s = 0: always the demo's settings"
