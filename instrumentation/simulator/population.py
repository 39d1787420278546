"""The simulated user population: N users (`user.SimUser`) driven on a simulated clock until a deadline.

    sim = Population(cfg, policy, sink, clock)         # sink: a TelemetryClient (or a ListSink in tests)
    sim.run(deadline)                                   # tasks start until `deadline`; their reactions drain
    sim.summary()

Two drivers, the same users:
  * deterministic (`StepClock`): one thread, a discrete-event loop over every user's agenda in (time, user)
    order; the clock jumps to each action's time. No wall clock is read, so the same seed and the same
    (deterministic) policy give the same events in the same order.
  * real time (`ScaledClock`): one thread per user, each sleeping until its next action's simulated time, so N
    users call the policy concurrently, like real clients.
  * deterministic and concurrent (`StepClock` with `concurrent=True`): one thread per user, each on its own
    agenda, so a policy that batches its callers (`expect()` and `participant()`, e.g.
    `infra.offline_cycle.LocalPolicy`)
    answers them together. Users never share state and a task's story depends only on the seed and the
    policy's answers, so the events are those of the one-thread loop (for the same answers).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import threading
from contextlib import nullcontext
from datetime import datetime, timedelta, timezone

from instrumentation.simulator.clock import SimClock, StepClock, parse_instant
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import Policy
from instrumentation.simulator.user import EventSink, SimUser, Stats

log = logging.getLogger("rtrl.simulator")


def run_key(seed: int, start: datetime) -> str:
    """Names one run (in session ids and event ids): two runs from different instants never share an event id."""
    return "r" + hashlib.sha256(f"{seed}:{start.isoformat()}".encode()).hexdigest()[:10]


def start_instant(cfg: SimulatorConfig, wall_seconds: float, now: datetime | None = None) -> datetime:
    """The simulated start: `cfg.start_time`, else early enough that the whole run, draining included, ends by the
    present, so event times never run ahead of their receipt (the data-quality suite checks that)."""
    if cfg.start_time:
        return parse_instant(cfg.start_time)
    now = now or datetime.now(timezone.utc)
    span = wall_seconds * cfg.speed + cfg.cleanup_delay_s + 60
    return (now - timedelta(seconds=span)).replace(microsecond=0)


class Population:
    def __init__(self, cfg: SimulatorConfig, policy: Policy, sink: EventSink, clock: SimClock, *,
                 users: int | None = None, keep_ledger: bool = True, concurrent: bool = False,
                 only: range | None = None):
        """`only`: run just these users of the population (a slice: the rest run elsewhere, e.g. in another
        process; each user's story depends only on the seed and the policy's answers)."""
        self.cfg, self.clock, self.policy, self.concurrent = cfg, clock, policy, concurrent
        self.stats = Stats(keep_ledger)
        self.run_id = run_key(cfg.seed, clock.start)
        n = cfg.users if users is None else users
        chosen = range(n) if only is None else only
        self.users = [SimUser(i, cfg, self.run_id, clock, policy, sink, self.stats) for i in chosen]
        self.stop = threading.Event()
        self.deadline: datetime | None = None

    def run(self, deadline: datetime, drain: bool = True) -> None:
        """Users start tasks until `deadline` (simulated); with `drain` the reactions to earlier requests (reverts,
        snapshots, follow-ups, next turns) still run after it, so every request gets its outcome."""
        self.deadline = deadline
        for u in self.users:
            u.start()
        if isinstance(self.clock, StepClock) and not self.concurrent:
            self._loop(deadline, drain)
        else:
            self._threads(deadline, drain)

    def _loop(self, deadline: datetime, drain: bool) -> None:
        clock = self.clock
        heap = [(t, i) for i, u in enumerate(self.users) if (t := u.next_time(deadline)) is not None]
        heapq.heapify(heap)
        while heap and not self.stop.is_set():
            t, i = heapq.heappop(heap)
            if not drain and t > deadline:
                break
            clock.advance_to(t)
            user = self.users[i]
            user.run_next()
            nxt = user.next_time(deadline)
            if nxt is not None:
                heapq.heappush(heap, (nxt, i))

    def _threads(self, deadline: datetime, drain: bool) -> None:
        threads = [threading.Thread(target=self._drive, args=(u, deadline, drain), daemon=True,
                                    name=f"sim-{u.user_id}") for u in self.users]
        if hasattr(self.policy, "expect") and hasattr(self.policy, "participant"):
            self.policy.expect(len(threads))       # a batching policy waits for every user's first request
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        except KeyboardInterrupt:
            self.stop.set()
            for t in threads:
                t.join(5.0)
            raise

    def _drive(self, user: SimUser, deadline: datetime, drain: bool) -> None:
        joined = getattr(self.policy, "participant", None)
        try:
            with joined() if joined else nullcontext():
                self._drive_user(user, deadline, drain)
        except Exception as e:  # noqa: BLE001 -- one user's bug must not hang the run; counted and logged
            log.exception("simulated user %s stopped: %s", user.user_id, e)
            self.stats.fail("user_crashed")
            self.stats.last_error = f"{type(e).__name__}: {e}"

    def _drive_user(self, user: SimUser, deadline: datetime, drain: bool) -> None:
        while not self.stop.is_set():
            t = user.next_time(deadline)
            if t is None or (not drain and t > deadline):
                return
            if not self.clock.wait_until(t, self.stop):
                return
            user.run_next()

    # -- reporting --------------------------------------------------------------------------------------------

    def summary(self) -> dict:
        s = self.stats
        with s.lock:
            c = dict(s.c)
            return {
                "users": len(self.users), "seed": self.cfg.seed, "run": self.run_id,
                "sim_start": self.clock.start.isoformat(),
                "sim_deadline": self.deadline.isoformat() if self.deadline else None,
                "sim_last_event": s.latest.isoformat() if s.latest else None,
                "sessions": c.get("sessions", 0),
                "requests": c.get("requests", 0),
                "by_outcome": dict(sorted(s.outcomes.items())),
                "needless_questions": c.get("needless_questions", 0),
                "by_arm": dict(sorted(s.arms.items())),
                "by_policy_version": dict(sorted(s.versions.items())),
                "edits": {k: c.get(f"edits_{k}", 0) for k in ("shown", "applied", "rejected", "kept", "reverted")},
                "followups": {k.removeprefix("followups_"): v for k, v in sorted(c.items())
                              if k.startswith("followups_")},
                "broken_calls": c.get("broken_calls", 0),
                "events_emitted": {"total": sum(s.events.values()), **dict(sorted(s.events.items()))},
                "failures": {**dict(sorted(s.failures.items())), **({"last_error": s.last_error}
                                                                     if s.last_error else {})},
            }

    def progress(self, elapsed_s: float) -> str:
        """The progress line: requests, edits kept/reverted, questions, broken calls, errors, simulated time."""
        s = self.stats
        with s.lock:
            c, latest = dict(s.c), s.latest
        now = self.clock.now()
        sim = f"sim {now:%Y-%m-%d %H:%M}Z (+{(now - self.clock.start).total_seconds() / 3600:.1f}h)"
        if latest is not None and (now - latest).total_seconds() > 600:
            sim += f" · users {(now - latest).total_seconds() / 60:.0f} min behind"
        return (f"simulate · requests {c.get('requests', 0):,} · edits applied {c.get('edits_applied', 0):,} "
                f"kept {c.get('edits_kept', 0):,} reverted {c.get('edits_reverted', 0):,} · questions "
                f"{c.get('questions', 0):,} · broken {c.get('broken_calls', 0):,} · errors {c.get('errors', 0):,} · "
                f"{sim} · {elapsed_s:.0f}s")
