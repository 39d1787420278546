"""When a failed cycle is tried again: capped exponential backoff over its failures in a row, and the point where it
is stuck. `next_retry` is the whole rule, with no I/O; the cadence (infra.orchestrator.cadence.decide) calls it with
the ledger record's failure times and the orchestrator's clock.

    policy = RetryPolicy(base_s=300, cap_s=3600, max_failures=6)
    r = next_retry([t1, t2], now, policy)
    r.due, r.stuck, r.next_at, r.wait_s        # False, False, t2 + 600 s, 600.0

A cycle's failures in a row are those since it last finished a step (or since an operator cleared it): a step that
raised, or a run whose runner died. After the k-th of them the cycle waits `base_s * 2**(k-1)`, at most `cap_s`,
from that failure; after `max_failures` of them it is stuck and is not tried again until an operator clears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 300.0
    cap_s: float = 3600.0
    max_failures: int = 6

    @classmethod
    def of(cls, orchestrator_cfg) -> "RetryPolicy":
        """The policy of `[orchestrator]`: retry_backoff_s, retry_backoff_max_s, max_failures."""
        o = orchestrator_cfg
        return cls(o.retry_backoff_s, o.retry_backoff_max_s, o.max_failures)


@dataclass(frozen=True)
class Retry:
    due: bool                    # it may run again now
    stuck: bool                  # max_failures reached: only an operator clears it
    failures: int                # failures in a row
    wait_s: float = 0.0          # the wait after the last failure
    next_at: datetime | None = None


def retry_delay_s(failures: int, policy: RetryPolicy) -> float:
    """The wait after the `failures`-th failure in a row: base_s, 2 x base_s, 4 x base_s, ..., at most cap_s; none
    before the first."""
    if failures <= 0:
        return 0.0
    return min(policy.cap_s, policy.base_s * 2.0 ** min(failures - 1, 60))


def next_retry(failure_times: list[datetime], now: datetime, policy: RetryPolicy) -> Retry:
    """Whether a cycle whose failures in a row happened at `failure_times` (oldest first) may run again at `now`."""
    k = len(failure_times)
    if k >= policy.max_failures:
        return Retry(due=False, stuck=True, failures=k)
    if k == 0:
        return Retry(due=True, stuck=False, failures=0)
    wait = retry_delay_s(k, policy)
    at = max(failure_times) + timedelta(seconds=wait)
    return Retry(due=now >= at, stuck=False, failures=k, wait_s=wait, next_at=at)
