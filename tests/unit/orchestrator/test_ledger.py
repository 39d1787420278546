"""The cycle ledger and the step runner: a step recorded done never runs again; a crash leaves it to be redone; the
latest cycle is one read of a pointer, whatever the ledger's length."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from infra.orchestrator import steps
from infra.orchestrator.clock import ManualClock
from infra.orchestrator.config import OrchestratorConfig
from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, LATEST, RUNNING, CycleRecord, Ledger
from infra.orchestrator.results import StepResult
from infra.orchestrator.steps import CycleBlocked, CycleContext, InjectedFailure, run_cycle, run_step

NOW = datetime(2026, 11, 1, tzinfo=timezone.utc)


@pytest.fixture
def counted(monkeypatch):
    """Every step replaced by one that counts its runs and returns its name (the runner is under test here)."""
    calls: dict[str, int] = {}

    class Ran(StepResult):
        ran: str

    def make(name):
        def fn(ctx):
            calls[name] = calls.get(name, 0) + 1
            return Ran(ran=name)
        return fn

    monkeypatch.setattr(steps, "STEP_FUNCS", {n: make(n) for n in steps.STEPS})
    return calls


def ctx_for(tmp_path, cycle_id="c1"):
    ledger = Ledger(tmp_path)
    rec = ledger.begin(cycle_id, NOW, 0.0)
    cfg = SimpleNamespace(state_path=tmp_path, orchestrator=OrchestratorConfig(source="files"))
    return CycleContext(cfg, record=rec, log=lambda m: None, clock=ManualClock(NOW)), ledger


def test_a_new_cycle_gets_the_next_sequence_number_and_records_its_runner(tmp_path):
    ledger = Ledger(tmp_path)
    a, b = ledger.begin("c1", NOW, 0.0), ledger.begin("c2", NOW, 0.0)
    assert (a.seq, b.seq, b.status) == (1, 2, RUNNING) and b.runner_pid > 0
    assert [r.cycle_id for r in ledger.all()] == ["c1", "c2"] and ledger.next_id() == "c3"


def test_a_cycle_keeps_the_settings_it_started_with_when_resumed(tmp_path):
    ledger = Ledger(tmp_path)
    rec = ledger.begin("c2", NOW, 0.0, ["trainer.max_rows=512", "gate.tasks.samples_per_task=2"])
    rec.status = FAILED
    ledger.save(rec)
    again = ledger.begin("c2", NOW, 5.0, ["trainer.max_rows=128"])       # the resuming run's own plan is ignored
    assert again.status == RUNNING and again.settings == ["trainer.max_rows=512", "gate.tasks.samples_per_task=2"]
    assert ledger.begin("c3", NOW, 0.0).settings == [], "a cycle started without settings runs with the config's"
    old = {k: v for k, v in ledger.load("c3").__dict__.items() if k != "settings"}
    ledger.path("c4").write_text(json.dumps({**old, "cycle_id": "c4", "seq": 4}))
    assert ledger.load("c4").settings == [], "a record written before settings existed still loads"


@pytest.mark.parametrize("bad", ["", "../x", ".hidden", "a/b"])
def test_cycle_ids_that_could_escape_the_ledger_folder_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="bad cycle id"):
        Ledger(tmp_path).path(bad)


def test_every_step_runs_once_in_order_and_the_cycle_is_done(tmp_path, counted):
    ctx, ledger = ctx_for(tmp_path)
    rec = run_cycle(ctx, ledger)
    assert rec.status == DONE and counted == {n: 1 for n in steps.STEPS}
    assert list(Ledger(tmp_path).load("c1").steps) == list(steps.STEPS)


@pytest.mark.parametrize("failing", steps.STEPS)
def test_a_failure_injected_after_a_step_reruns_only_that_step_and_the_rest(tmp_path, counted, monkeypatch, failing):
    monkeypatch.setenv(steps.FAIL_AFTER_ENV, failing)
    ctx, ledger = ctx_for(tmp_path)
    with pytest.raises(InjectedFailure):
        run_cycle(ctx, ledger)
    saved = Ledger(tmp_path).load("c1")
    assert saved.status == FAILED and failing in saved.error and not saved.done(failing)
    monkeypatch.delenv(steps.FAIL_AFTER_ENV)
    ctx, ledger = ctx_for(tmp_path)   # the resumed run: same cycle id
    assert run_cycle(ctx, ledger).status == DONE
    i = steps.STEPS.index(failing)
    assert counted == {n: (2 if n == failing else 1) for n in steps.STEPS}, "steps before it ran once, it twice"
    assert all(counted[n] == 1 for n in steps.STEPS[i + 1:])


def test_a_blocked_step_finishes_the_cycle_as_blocked_and_a_rerun_does_nothing(tmp_path, counted, monkeypatch):
    def refuse(ctx):
        raise CycleBlocked("data quality failed", 3)

    monkeypatch.setitem(steps.STEP_FUNCS, "validate", refuse)
    ctx, ledger = ctx_for(tmp_path)
    with pytest.raises(CycleBlocked):
        run_cycle(ctx, ledger)
    assert Ledger(tmp_path).load("c1").status == BLOCKED
    ctx, ledger = ctx_for(tmp_path)
    assert run_cycle(ctx, ledger).status == BLOCKED and "train" not in counted


def test_run_step_returns_the_recorded_result_without_running(tmp_path, counted):
    ctx, ledger = ctx_for(tmp_path)
    first = run_step(ctx, ledger, "collect")
    assert run_step(ctx, ledger, "collect") == first and counted["collect"] == 1


def test_the_latest_cycle_and_the_next_id_are_read_through_the_pointer_without_listing_the_ledger(tmp_path,
                                                                                                   monkeypatch):
    ledger = Ledger(tmp_path)
    for cid in ("c1", "c2", "c3"):
        ledger.begin(cid, NOW, 0.0)
    ledger.save(ledger.load("c2"))                      # an older cycle saved again does not move the pointer

    def listed():
        raise AssertionError("the ledger was listed")

    monkeypatch.setattr(Ledger, "all", lambda self: listed())
    assert ledger.latest().cycle_id == "c3" and ledger.next_id() == "c4"
    assert ledger.begin("c4", NOW, 0.0).seq == 4 and ledger.latest().cycle_id == "c4"


def test_a_ledger_without_a_pointer_or_whose_pointer_names_a_removed_cycle_is_listed_once_and_gets_one(tmp_path):
    ledger = Ledger(tmp_path)
    for cid in ("c1", "c2"):
        ledger.begin(cid, NOW, 0.0)
    (ledger.root / LATEST).unlink()                     # a ledger written before the pointer existed
    assert ledger.latest().cycle_id == "c2" and json.loads((ledger.root / LATEST).read_text())["cycle_id"] == "c2"
    ledger.save(CycleRecord("c3", 3, NOW.isoformat(), 0.0))
    (ledger.root / "c3.json").unlink()
    assert ledger.latest().cycle_id == "c2" and ledger.next_id() == "c3"
    assert [r.cycle_id for r in ledger.all()] == ["c1", "c2"], "the pointer is not a cycle"


def test_the_step_running_now_is_recorded_with_its_process_and_cleared_when_it_ends(tmp_path, monkeypatch):
    import os

    ledger = Ledger(tmp_path)
    seen = {}

    class Ok(StepResult):
        pass

    def probe(ctx):
        seen.update(ledger.load("c1").current)
        return Ok()

    rec = ledger.begin("c1", datetime(2026, 1, 1, tzinfo=timezone.utc), 0.0)
    ctx = SimpleNamespace(record=rec, log=lambda m: None, now=lambda: datetime(2026, 1, 1, tzinfo=timezone.utc),
                          cfg=SimpleNamespace(orchestrator=OrchestratorConfig()))
    monkeypatch.setitem(steps.STEP_FUNCS, "collect", probe)
    steps.run_step(ctx, ledger, "collect")
    assert seen["step"] == "collect" and seen["pid"] == os.getpid()
    assert ledger.load("c1").current is None and ledger.load("c1").done("collect")
