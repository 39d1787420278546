"""Pair a candidate's and a champion's episodes by (task_id, sample): the same task with the same seed.

A pair is *valid* when both arms have an episode and neither is an infrastructure failure. Any other pair is
dropped from BOTH arms: keeping the surviving arm's episode would compare the two checkpoints on different task
sets (a candidate whose failures crash the harness would lose its hardest tasks from its own denominator only).
Dropped pairs are counted, and too many of them keep the champion (decision.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from evals.records import Episode


@dataclass
class Pairs:
    """Valid pairs as parallel arrays (one row per pair, sorted by task then sample) plus what was dropped."""

    task_ids: list[str]                  # distinct task ids, index = cluster id
    cluster: np.ndarray                  # int, the pair's task index into task_ids
    candidate: list[Episode]
    champion: list[Episode]
    total: int = 0                       # (task, sample) keys seen in either arm
    dropped_infra: int = 0               # at least one arm had an infrastructure failure
    unpaired: int = 0                    # one arm has no episode for the key (and the other was no infra failure)
    infra_episodes: dict[str, int] = field(default_factory=dict)   # per arm label
    episodes: dict[str, int] = field(default_factory=dict)         # per arm label

    @property
    def n(self) -> int:
        return len(self.candidate)

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    @property
    def dropped_rate(self) -> float:
        return (self.dropped_infra + self.unpaired) / self.total if self.total else 0.0

    def column(self, arm: str, name: str) -> np.ndarray:
        """One field (or property) of every valid pair's episode of `arm` as a float array."""
        eps = self.candidate if arm == "candidate" else self.champion
        return np.array([float(getattr(e, name)) for e in eps], dtype=float)


def pair_episodes(episodes: Iterable[Episode], candidate: str = "candidate", champion: str = "champion") -> Pairs:
    """Group `episodes` by (task_id, sample) and keep the keys where both arms ran without infrastructure failure.
    Raises ValueError on an arm label other than the two given or on two episodes for the same key and arm
    (a harness bug that would silently weight one sample twice)."""
    by_key: dict[tuple[str, int], dict[str, Episode]] = {}
    counts = {candidate: 0, champion: 0}
    infra = {candidate: 0, champion: 0}
    for ep in episodes:
        if ep.arm not in counts:
            raise ValueError(f"episode of arm {ep.arm!r}: the gate compares {candidate!r} with {champion!r}")
        slot = by_key.setdefault((ep.task_id, int(ep.sample)), {})
        if ep.arm in slot:
            raise ValueError(f"two {ep.arm!r} episodes for task {ep.task_id!r} sample {ep.sample}")
        slot[ep.arm] = ep
        counts[ep.arm] += 1
        infra[ep.arm] += 0 if ep.valid else 1
    task_index: dict[str, int] = {}
    cluster, cand, champ = [], [], []
    dropped = unpaired = 0
    for key in sorted(by_key):
        slot = by_key[key]
        if any(not e.valid for e in slot.values()):
            dropped += 1
        elif len(slot) < 2:
            unpaired += 1
        else:
            cluster.append(task_index.setdefault(key[0], len(task_index)))
            cand.append(slot[candidate])
            champ.append(slot[champion])
    return Pairs(task_ids=list(task_index), cluster=np.array(cluster, dtype=int), candidate=cand, champion=champ,
                 total=len(by_key), dropped_infra=dropped, unpaired=unpaired, infra_episodes=infra, episodes=counts)
