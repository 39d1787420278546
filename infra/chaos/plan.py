"""The fault plan: which fault comes when, drawn from one seed, so a chaos run can be repeated.

    plan = make_plan(seed=0, faults=20)           # -> list[Fault], every type at least once when faults >= 9
    plan[0].kind, plan[0].gap_s, plan[0].downtime_s

Faults are injected one after another (the next starts once the loop has recovered from the last), so each
recovery time is measured on its own and an outage never outlasts what the loop is configured to tolerate
(see `infra.chaos.runner`). The moment of each fault is the seeded pause before it (`gap_s`) measured from the
previous recovery; for a job (the reward job, the trainer) it is also the seeded point of its run at which it is
killed (`kill_after_s`).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

SERVICES = ("broker", "archiver", "collector", "serving")   # killed (SIGKILL), down a while, restarted
JOBS = ("reward_job", "trainer")                             # killed mid-run, then run again to completion
FLOODS = ("duplicates", "out_of_order", "late_events")       # hostile replays produced straight to Kafka
FAULT_TYPES = SERVICES + JOBS + FLOODS

# Restarting serving (vLLM engine load) and a trainer run cost about a minute each on 2 cores: at most this share
# of the plan, at least one each.
EXPENSIVE = {"serving": 0.1, "trainer": 0.1}


@dataclass(frozen=True)
class Fault:
    index: int
    kind: str
    gap_s: float          # wall seconds of normal traffic before the fault (after the previous recovery)
    downtime_s: float     # services: how long the killed process stays down before the restart
    kill_after_s: float   # jobs: wall seconds into the run at which it is killed
    size: int             # floods: messages replayed
    seed: int             # floods: which messages, in which order

    def as_dict(self) -> dict:
        return asdict(self)


def type_counts(faults: int, types: tuple[str, ...] = FAULT_TYPES, seed: int = 0) -> dict[str, int]:
    """How many faults of each type: every type once (when there are enough faults), expensive types capped at
    their share, the rest spread over the cheap types by a seeded draw."""
    if faults < 1:
        raise ValueError("a chaos plan needs at least one fault")
    unknown = sorted(set(types) - set(FAULT_TYPES))
    if unknown or not types:
        raise ValueError(f"unknown fault types {unknown}; known: {', '.join(FAULT_TYPES)}")
    rng = random.Random(f"counts:{seed}")
    order = list(dict.fromkeys(types))
    rng.shuffle(order)
    if faults < len(order):   # too few faults for every type: the cheap ones first, then a seeded choice
        cheap = [t for t in order if t not in EXPENSIVE]
        order = (cheap + [t for t in order if t in EXPENSIVE])[:faults]
    counts = {t: 1 for t in order}
    caps = {t: max(1, int(faults * EXPENSIVE.get(t, 1.0))) for t in counts}
    pool = [t for t in counts if t not in EXPENSIVE] or list(counts)
    while sum(counts.values()) < faults:
        t = rng.choice(pool)
        if counts[t] < caps[t] or t not in EXPENSIVE:
            counts[t] += 1
    return counts


def make_plan(seed: int, faults: int, types: tuple[str, ...] = FAULT_TYPES, gap_s: tuple[float, float] = (3.0, 12.0),
              downtime_s: tuple[float, float] = (1.0, 8.0), flood_size: tuple[int, int] = (100, 600)) -> list[Fault]:
    """`faults` faults of `types` in a seeded order with seeded gaps, downtimes, kill points and flood sizes.
    The same arguments always give the same plan."""
    counts = type_counts(faults, types, seed)
    kinds = [t for t, n in sorted(counts.items()) for _ in range(n)]
    rng = random.Random(f"plan:{seed}")
    rng.shuffle(kinds)
    plan = []
    for i, kind in enumerate(kinds):
        kill = {"reward_job": (1.0, 12.0), "trainer": (4.0, 30.0)}.get(kind, (0.0, 0.0))
        plan.append(Fault(index=i, kind=kind, gap_s=round(rng.uniform(*gap_s), 2),
                          downtime_s=round(rng.uniform(*downtime_s), 2) if kind in SERVICES else 0.0,
                          kill_after_s=round(rng.uniform(*kill), 2) if kind in JOBS else 0.0,
                          size=rng.randint(*flood_size) if kind in FLOODS else 0,
                          seed=rng.randrange(2**31)))
    return plan
