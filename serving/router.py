"""Sticky A/B assignment: a user always lands in the same arm of an experiment (docs/serving.md).

The point u = BLAKE2b-64(experiment + NUL + user_id) / 2^64 in [0, 1) falls into one arm's slice of the
cumulative shares, in the order the arms are configured. It depends on nothing but the two strings (no
process-salted `hash()`), so every gateway replica, the A/B analysis and a later replay agree; a new experiment
name reshuffles every user, and changing the shares moves only the users in the slices that change.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from itertools import accumulate

from serving.config import ArmConfig


def unit_hash(experiment: str, user_id: str) -> float:
    """A deterministic point in [0, 1) for (experiment, user)."""
    digest = hashlib.blake2b(f"{experiment}\0{user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class Router:
    def __init__(self, experiment: str, arms: list[ArmConfig]):
        if not arms:
            raise ValueError("a router needs at least one arm")
        self.experiment = experiment
        self.names = [a.name for a in arms]
        total = sum(a.share for a in arms)
        # Upper edges of each arm's slice; the last is exactly 1 so rounding never leaves a gap.
        self._edges = [c / total for c in accumulate(a.share for a in arms)][:-1] + [1.0]

    def assign(self, user_id: str) -> str:
        """The arm name of `user_id` (an arm with share 0 never gets anyone)."""
        i = bisect_right(self._edges, unit_hash(self.experiment, user_id))
        return self.names[min(i, len(self.names) - 1)]
