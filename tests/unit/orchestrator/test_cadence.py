"""The cadence rule: a true interval from the last cycle's start, one cycle at a time, enough mature rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from infra.orchestrator.cadence import decide
from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, RUNNING, CycleRecord

T0 = datetime(2026, 11, 1, 0, 0, tzinfo=timezone.utc)
H = 3600.0


def rec(cid: str, seq: int, started: datetime, status: str, pid: int | None = None) -> CycleRecord:
    return CycleRecord(cid, seq, started.isoformat(), 0.0, status=status, runner_pid=pid, error="boom")


def never_counted() -> int:
    raise AssertionError("mature rows must not be counted when the decision is already made")


def test_first_cycle_starts_once_enough_rows_are_mature():
    d = decide(T0, None, lambda: 250, interval_s=5 * H, min_rows=200)
    assert (d.start, d.cycle_id, d.resume) == (True, "c1", False)
    assert "250 mature requests" in d.reason


def test_too_few_mature_rows_skip_with_the_count():
    d = decide(T0, None, lambda: 199, interval_s=5 * H, min_rows=200)
    assert not d.start and d.reason.startswith("too few mature rows: 199") and d.details["mature_rows"] == 199


def test_interval_is_measured_from_the_last_start_not_its_end():
    last = rec("c1", 1, T0, DONE)
    early = decide(T0 + timedelta(hours=4, minutes=59), last, never_counted, interval_s=5 * H, min_rows=1)
    assert not early.start and early.reason.startswith("too early") and "next at 2026-11-01T05:00:00" in early.reason
    due = decide(T0 + timedelta(hours=5), last, lambda: 10, interval_s=5 * H, min_rows=1)
    assert (due.start, due.cycle_id) == (True, "c2") and "5.00 h since c1 started" in due.reason


def test_a_running_cycle_blocks_the_next_one_while_its_runner_lives():
    running = rec("c3", 3, T0, RUNNING, pid=4242)
    d = decide(T0 + timedelta(days=1), running, never_counted, 5 * H, 1, alive=lambda r: r.runner_pid == 4242)
    assert not d.start and "previous cycle c3 is still running" in d.reason


def test_a_cycle_whose_runner_finished_its_steps_is_resumed_under_its_own_id_at_once():
    orphan = rec("c3", 3, T0, RUNNING, pid=4242)
    d = decide(T0 + timedelta(minutes=1), orphan, never_counted, 5 * H, 1, alive=lambda r: False,
               crashed=lambda r: False)
    assert (d.start, d.cycle_id, d.resume, d.failure) == (True, "c3", True, None)


def test_a_failed_cycle_is_resumed_before_any_new_one():
    failed = rec("c2", 2, T0, FAILED)
    d = decide(T0 + timedelta(minutes=5), failed, never_counted, 5 * H, 1)
    assert (d.start, d.cycle_id, d.resume) == (True, "c2", True) and "boom" in d.reason


def test_a_blocked_cycle_counts_as_finished():
    blocked = rec("c2", 2, T0, BLOCKED)
    assert not decide(T0 + timedelta(hours=1), blocked, never_counted, 5 * H, 1).start
    d = decide(T0 + timedelta(hours=5), blocked, lambda: 5, 5 * H, 1)
    assert (d.start, d.cycle_id) == (True, "c3")


def test_requests_count_as_mature_by_the_newest_request_when_the_clients_clock_lags_the_orchestrators():
    from infra.orchestrator.cadence import mature_count

    delay = timedelta(minutes=60)                        # maturity 45 min + allowed lateness 15 min
    made = [T0 + timedelta(minutes=m) for m in range(0, 70)]   # one request a minute, the newest at T0 + 69 min
    assert mature_count([], T0, delay) == 0
    # the orchestrator's clock 30 min ahead of the newest request: the reward job's watermark follows the events
    assert mature_count(made, T0 + timedelta(minutes=99), delay) == 10      # made by T0 + 9 min
    # the clock behind the newest request: no more than the clock allows
    assert mature_count(made, T0 + timedelta(minutes=65), delay) == 6       # made by T0 + 5 min


def test_a_request_dated_2099_does_not_make_every_request_look_mature():
    from infra.orchestrator.cadence import mature_count

    delay = timedelta(minutes=60)
    made = [T0 + timedelta(minutes=m) for m in range(0, 30)] + [datetime(2099, 12, 31, tzinfo=timezone.utc)]
    marks = made[:-1] + [T0 + timedelta(minutes=35)]  # its watermark time: its receipt + the skew
    far_future_now = T0 + timedelta(days=1)
    assert mature_count(made, far_future_now, delay) == 30                 # by event times alone: all mature
    assert mature_count(made, far_future_now, delay, marks) == 0           # bounded by receipt: none yet
