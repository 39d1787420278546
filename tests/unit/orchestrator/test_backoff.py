"""Failures back off: a failing step is retried after capped exponential waits, and after max_failures failures in a
row the cycle is stuck, said so by the cadence and refused by the executors, until an operator clears it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from infra.orchestrator import steps
from infra.orchestrator.backoff import RetryPolicy, next_retry, retry_delay_s
from infra.orchestrator.cadence import decide, record_outcome
from infra.orchestrator.clock import ManualClock
from infra.orchestrator.config import OrchestratorConfig
from infra.orchestrator.ledger import DONE, FAILED, RUNNING, STUCK, Ledger
from infra.orchestrator.results import StepResult
from infra.orchestrator.steps import CycleContext, CycleStuck, run_cycle

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
POLICY = RetryPolicy(base_s=300, cap_s=3600, max_failures=6)


def never_counted() -> int:
    raise AssertionError("a failed cycle is resumed or waited for: no new cycle is counted for")


def test_the_wait_doubles_from_the_base_after_each_failure_up_to_the_cap():
    assert [retry_delay_s(k, POLICY) for k in range(0, 8)] == [0, 300, 600, 1200, 2400, 3600, 3600, 3600]
    assert retry_delay_s(10_000, POLICY) == 3600, "no overflow however many failures"
    r = next_retry([T0, T0 + timedelta(seconds=400)], T0 + timedelta(seconds=999), POLICY)
    assert (r.due, r.stuck, r.failures, r.wait_s) == (False, False, 2, 600)
    assert r.next_at == T0 + timedelta(seconds=1000), "measured from the last failure"
    assert next_retry([T0, T0 + timedelta(seconds=400)], T0 + timedelta(seconds=1000), POLICY).due
    assert next_retry([T0] * 6, T0 + timedelta(days=30), POLICY).stuck


class Ran(StepResult):
    ran: str


@pytest.fixture
def flaky(monkeypatch):
    """Every step passes, except those named in `failing` (a set the test changes), which raise."""
    failing: set[str] = set()
    calls: dict[str, int] = {}

    def make(name):
        def fn(ctx):
            calls[name] = calls.get(name, 0) + 1
            if name in failing:
                raise RuntimeError(f"{name} cannot reach its service")
            return Ran(ran=name)
        return fn

    monkeypatch.setattr(steps, "STEP_FUNCS", {n: make(n) for n in steps.STEPS})
    return failing, calls


def run(tmp_path, clock, cycle_id="c1"):
    """The in-process executor on a cycle of the ledger in `tmp_path`, at `clock`'s time."""
    cfg = SimpleNamespace(state_path=tmp_path, orchestrator=OrchestratorConfig(source="files"))
    ledger = Ledger(tmp_path)
    rec = ledger.begin(cycle_id, clock.now(), 0.0)
    return run_cycle(CycleContext(cfg, rec, log=lambda m: None, clock=clock), ledger)


def tick(tmp_path, clock):
    """One cadence decision over the ledger's latest record, and what it says of it written back."""
    ledger = Ledger(tmp_path)
    last = ledger.latest()
    d = decide(clock.now(), last, never_counted, 5 * 3600, 1, alive=lambda r: False, retry=POLICY)
    record_outcome(ledger, last, d, clock.now(), POLICY.max_failures)
    return d


def test_a_step_that_keeps_failing_is_retried_after_growing_waits_then_stuck_until_an_operator_clears_it(
        tmp_path, flaky):
    failing, calls = flaky
    failing.add("train")
    clock = ManualClock(T0)
    waits = []
    for attempt in range(1, POLICY.max_failures + 1):
        with pytest.raises(RuntimeError, match="train cannot reach"):
            run(tmp_path, clock)
        rec = Ledger(tmp_path).load("c1")
        assert len(rec.failures) == rec.failures_total == attempt
        assert rec.failures[-1]["step"] == "train" and rec.failures[-1]["at"] == clock.now().isoformat()
        if attempt == POLICY.max_failures:
            break
        assert rec.status == FAILED
        d = tick(tmp_path, clock)
        assert not d.start and d.reason.startswith(f"backing off: cycle c1 failed {attempt} time(s) in a row")
        waits.append(d.details["wait_s"])
        clock.advance(d.details["wait_s"] - 1)
        assert not tick(tmp_path, clock).start, "one second before the retry is due: still waiting"
        clock.advance(1)
        d = tick(tmp_path, clock)
        assert (d.start, d.cycle_id, d.resume) == (True, "c1", True), d.reason
    assert waits == [300, 600, 1200, 2400, 3600]
    assert calls["collect"] == 1 and calls["train"] == POLICY.max_failures, "done steps are not redone"

    stuck = Ledger(tmp_path).load("c1")
    assert stuck.status == STUCK
    clock.advance(30 * 86400)                     # however long it waits: only an operator clears it
    d = tick(tmp_path, clock)
    assert not d.start and d.details == {"stuck": "c1", "failures": POLICY.max_failures}
    assert "c1 is stuck: 6 failures in a row" in d.reason and "train cannot reach" in d.reason
    assert "rtrl cycle c1 --unstick" in d.reason
    with pytest.raises(CycleStuck, match="rtrl cycle c1 --retry"):
        run(tmp_path, clock)                      # the in-process executor refuses it too
    assert calls["train"] == POLICY.max_failures, "a stuck cycle's steps do not run"
    assert Ledger(tmp_path).load("c1").failures_total == POLICY.max_failures, "a refusal is no failure"

    Ledger(tmp_path).unstick("c1")
    d = tick(tmp_path, clock)
    assert (d.start, d.cycle_id, d.resume) == (True, "c1", True), "cleared: retried at once"
    failing.clear()
    rec = run(tmp_path, clock)
    assert rec.status == DONE and rec.failures == [] and rec.failures_total == POLICY.max_failures


def test_a_step_that_finishes_ends_the_failures_in_a_row(tmp_path, flaky):
    failing, _ = flaky
    clock = ManualClock(T0)
    failing.add("collect")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            run(tmp_path, clock)
    failing.clear()
    failing.add("distill")
    with pytest.raises(RuntimeError):
        run(tmp_path, clock)
    rec = Ledger(tmp_path).load("c1")
    assert [f["step"] for f in rec.failures] == ["distill"] and rec.failures_total == 3
    assert tick(tmp_path, clock).details["wait_s"] == 300, "the backoff starts over after progress"


def test_an_interrupted_step_is_not_a_failure_of_the_cycle(tmp_path, monkeypatch):
    def interrupted(ctx):
        raise KeyboardInterrupt

    monkeypatch.setitem(steps.STEP_FUNCS, "collect", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, ManualClock(T0))
    rec = Ledger(tmp_path).load("c1")
    assert rec.status == FAILED and rec.failures == [] and rec.failures_total == 0


def test_a_runner_that_died_is_a_failure_and_one_that_finished_its_steps_is_not(tmp_path):
    ledger = Ledger(tmp_path)
    clock = ManualClock(T0)
    ledger.begin("c1", T0, 0.0)
    # its run finished the steps it was given (the demo's measure steps alone): resumed at once, nothing recorded
    d = decide(clock.now(), ledger.latest(), never_counted, 3600, 1, alive=lambda r: False, crashed=lambda r: False,
               retry=POLICY)
    assert (d.start, d.resume, d.failure) == (True, True, None)
    # its run failed or vanished (a killed worker): one failure, recorded by the cadence, then the usual backoff
    d = decide(clock.now(), ledger.latest(), never_counted, 3600, 1, alive=lambda r: False, retry=POLICY)
    assert not d.start and d.failure and d.details["wait_s"] == 300
    record_outcome(ledger, ledger.latest(), d, clock.now(), POLICY.max_failures)
    rec = ledger.load("c1")
    assert rec.status == FAILED and len(rec.failures) == 1 and "runner of cycle c1 died" in rec.error
    clock.advance(300)
    assert tick(tmp_path, clock).start


def test_a_running_cycle_whose_runner_dies_max_failures_times_is_stuck(tmp_path):
    ledger = Ledger(tmp_path)
    clock = ManualClock(T0)
    for _ in range(POLICY.max_failures):
        rec = ledger.begin("c1", clock.now(), 0.0)       # resumed: running again, and its runner dies again
        assert rec.status == RUNNING
        d = tick(tmp_path, clock)
        clock.advance(POLICY.cap_s)
    assert d.details.get("stuck") == "c1" and ledger.load("c1").status == STUCK
    assert ledger.begin("c1", clock.now(), 0.0).status == STUCK, "a stuck cycle is not begun again"
