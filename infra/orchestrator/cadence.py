"""When the next cycle starts (docs/orchestrator.md): a true interval measured from the last cycle's START, one
cycle at a time, and only with enough mature traffic. `decide` is the whole rule, with no I/O; the Dagster sensor
and `rtrl demo` call it with the ledger's latest record (`Ledger.latest()`, one read), the orchestrator's clock and a
lazy count of mature requests.

    d = decide(now, ledger.latest(), lambda: count_mature_requests(cfg, now), interval_s=5 * 3600, min_rows=200)
    d.start, d.cycle_id, d.reason     # True, "c4", "5.0 h since c3 started, 1,204 mature requests"

Rules, in order:
  1. the last cycle is running and its runner is alive: skip ("previous cycle still running"). Alive means, for
     the sensor, that the Dagster run executing it (CycleRecord.dagster_run_id) is active in the instance
     (`definitions.run_alive`), whichever host it runs on; `decide`'s default, for a cycle run outside Dagster,
     checks its runner's pid on this host;
  2. the last cycle is stuck (`retry.max_failures` failures in a row): skip, with its failures and how an operator
     clears it; nothing starts until then;
  3. the last cycle failed, or is marked running but its runner died (`crashed`: its Dagster run failed or is gone,
     its process is gone; the decision's `failure` asks the caller to record that in the ledger as a failure): start
     it again under the same id (resume; its done steps are not redone) once its backoff has passed
     (infra.orchestrator.backoff), else skip ("backing off", with the time of the retry). A runner that finished
     its selection of steps (the demo's measure steps alone) left no failure: its cycle resumes at once;
  4. less than `interval_s` since the last cycle started: skip ("too early", with the time of the next chance);
  5. fewer than `min_rows` mature requests since the last cycle's range: skip ("too few mature rows");
  6. otherwise start the next cycle id.
A blocked cycle (data quality failed, data refused) is finished: the next one starts on the usual interval.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from infra.orchestrator.backoff import RetryPolicy, next_retry
from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, RUNNING, STUCK, CycleRecord, next_cycle_id


@dataclass
class CadenceDecision:
    start: bool
    reason: str
    cycle_id: str | None = None
    resume: bool = False
    details: dict = field(default_factory=dict)
    failure: str | None = None     # a runner that died: the failure the caller records for the cycle (`cycle_id`)


def pid_alive(rec: CycleRecord) -> bool:
    """Whether the process that runs `rec` on this host still runs (a cycle run outside Dagster)."""
    pid = rec.runner_pid
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def decide(now: datetime, last: CycleRecord | None, mature_rows: Callable[[], int], interval_s: float,
           min_rows: int, alive: Callable[[CycleRecord], bool] = pid_alive,
           crashed: Callable[[CycleRecord], bool] = lambda rec: True,
           retry: RetryPolicy = RetryPolicy()) -> CadenceDecision:
    """The cadence's decision at `now` after `last`, the ledger's latest cycle (None: no cycle yet). `crashed`: whether
    a running cycle's runner that is gone died rather than finished the steps it was given."""
    next_id = next_cycle_id([last] if last else [])
    if last is not None and last.status == RUNNING:
        if alive(last):
            return CadenceDecision(False, f"previous cycle {last.cycle_id} is still running (since "
                                          f"{last.started_at})", details={"running": last.cycle_id})
        if not crashed(last):
            return CadenceDecision(True, f"cycle {last.cycle_id} was left running by a runner that finished its "
                                         "steps: resuming it", last.cycle_id, resume=True)
        return _retry(now, last, [*last.failure_times(), now], retry, "its runner died",
                      failure=f"the runner of cycle {last.cycle_id} died (its Dagster run failed or is gone, or its "
                              "process exited) before the cycle finished")
    if last is not None and last.status in (FAILED, STUCK):
        return _retry(now, last, last.failure_times(), retry, last.error[:200])
    if last is not None and last.status in (DONE, BLOCKED):
        due = datetime.fromisoformat(last.started_at) + timedelta(seconds=interval_s)
        if now < due:
            return CadenceDecision(False, f"too early: {_hours((now - datetime.fromisoformat(last.started_at)))} "
                                          f"since {last.cycle_id} started, the interval is "
                                          f"{interval_s / 3600:g} h (next at {due.isoformat()})",
                                   details={"next_at": due.isoformat()})
    n = mature_rows()
    if n < min_rows:
        return CadenceDecision(False, f"too few mature rows: {n:,} mature requests since the last cycle, "
                                      f"{min_rows:,} needed", details={"mature_rows": n})
    since = f"{_hours(now - datetime.fromisoformat(last.started_at))} since {last.cycle_id} started, " if last else ""
    return CadenceDecision(True, f"{since}{n:,} mature requests", next_id, details={"mature_rows": n})


def _retry(now: datetime, rec: CycleRecord, failure_times: list[datetime], policy: RetryPolicy, why: str,
           failure: str | None = None) -> CadenceDecision:
    """A failed cycle (or one whose runner just died: `failure`, counted in `failure_times` already): resumed, backing
    off, or stuck."""
    cid, r = rec.cycle_id, next_retry(failure_times, now, policy)
    if r.stuck or rec.status == STUCK:
        return CadenceDecision(False, f"cycle {cid} is stuck: {r.failures} failures in a row, at most "
                                      f"{policy.max_failures} (orchestrator.max_failures); last: {why}. It is not "
                                      f"retried, and no cycle starts, until an operator clears it: `rtrl cycle {cid} "
                                      f"--unstick` (the cadence retries it) or `rtrl cycle {cid} --retry` (run here)",
                               cid, details={"stuck": cid, "failures": r.failures}, failure=failure)
    if not r.due:
        return CadenceDecision(False, f"backing off: cycle {cid} failed {r.failures} time(s) in a row ({why}); "
                                      f"retry {r.failures + 1} of at most {policy.max_failures} at "
                                      f"{r.next_at.isoformat()}, {r.wait_s:g} s after the last failure",
                               cid, details={"backoff": cid, "failures": r.failures, "retry_at": r.next_at.isoformat(),
                                             "wait_s": r.wait_s}, failure=failure)
    return CadenceDecision(True, f"cycle {cid} failed ({why}): resuming it"
                                 + (f" (retry {r.failures + 1}, after {r.wait_s:g} s of backoff)" if r.failures
                                    else ""), cid, resume=True, details={"failures": r.failures}, failure=failure)


def record_outcome(ledger, last: CycleRecord | None, d: CadenceDecision, now: datetime, max_failures: int) -> None:
    """What decision `d` about `last` says of it, written to the ledger (`decide` does no I/O): a runner that died is
    a failure of the cycle (`d.failure`); a cycle past `max_failures` is marked stuck."""
    if last is None:
        return
    if d.failure:
        ledger.record_failure(last, now, None, d.failure, max_failures)
    elif d.details.get("stuck") and last.status != STUCK:
        last.status = STUCK
        ledger.save(last)


def _hours(d: timedelta) -> str:
    return f"{d.total_seconds() / 3600:.2f} h"


def mature_count(request_times: list[datetime], now: datetime, delay: timedelta,
                 marks: list[datetime] | None = None) -> int:
    """How many of the requests made at `request_times` a range fixed now would emit as mature: made at least
    `delay` (maturity + allowed lateness) before the newest watermark time among them, and before `now`. `marks`
    are the times each request may move the watermark to (`kafka_range.watermark_time`: its event time, at most its
    receipt + the skew, so one event dated 2099 cannot make every request look mature); default the event times."""
    if not request_times:
        return 0
    cutoff = min(max(marks or request_times), now) - delay
    return sum(t <= cutoff for t in request_times)


def count_mature_requests(cfg, now: datetime, timeout_s: float = 60.0) -> int:
    """Served requests (trajectory events) in Kafka after the last reward cycle's range whose rows a range fixed now
    would emit: event_time + the reward spec's maturity delay <= its watermark, the newest event time in it minus the
    allowed lateness (`pipelines.rewards.kafka_range.range_watermark`), and no later than `now` allows. The newest
    event time is that of the newest request read (the range's may be newer: a conservative count). When the
    clients' clocks lag the orchestrator's (simulated users that fell behind), `now` alone counted rows the reward
    job did not emit yet (431 counted, 220 emitted). Reads the trajectories topic from the last done cycle's end
    offsets up to the log end as the broker reports it now (an estimate: Tansu reports the last batch's base
    offset + 1)."""
    from kafka import KafkaConsumer, TopicPartition

    from pipelines.rewards.cycle_job import CycleStore, start_after
    from pipelines.rewards.kafka_range import _event_time, key, watermark_time
    from schemas.kafka_clients import kafka_client_args
    from schemas.topics import TRAJECTORY_TOPIC

    start = start_after(CycleStore(cfg.rewards_root()).latest_done(), cfg.kafka)
    delay = timedelta(seconds=cfg.rewards.maturity_delay_s() + cfg.rewards.allowed_lateness_s)
    c = KafkaConsumer(**kafka_client_args(cfg.kafka), enable_auto_commit=False, group_id=None,
                      max_poll_records=5000, fetch_max_bytes=64 * 1024 * 1024)
    try:
        tps = [TopicPartition(TRAJECTORY_TOPIC, p) for p in sorted(c.partitions_for_topic(TRAJECTORY_TOPIC) or ())]
        if not tps:
            return 0
        c.assign(tps)
        first = {tp: start.get(key((tp.topic, tp.partition)), 0) for tp in tps}
        for tp in tps:
            c.seek(tp, first[tp])
        ends = c.end_offsets(tps)      # a count as of now: traffic arriving while counting is left for later
        behind = {tp for tp in tps if ends.get(tp, 0) > first[tp]}
        times, marks, deadline = [], [], time.monotonic() + timeout_s
        while behind and time.monotonic() < deadline:
            for tp, records in c.poll(timeout_ms=300).items():
                for r in records:
                    if r.offset >= ends[tp]:
                        break
                    if (t := _event_time(r.value)) is not None:
                        times.append(t)
                        if (m := watermark_time(r.value, r.timestamp)) is not None:
                            marks.append(m)
                if records and records[-1].offset + 1 >= ends[tp]:
                    behind.discard(tp)
                    c.pause(tp)
        return mature_count(times, now, delay, marks)
    finally:
        c.close()
