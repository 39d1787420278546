"""Chains of weight deltas: when a version is stored whole (an anchor), how a version is rebuilt from the nearest
anchor (registry.retention walks the same chains to keep what a kept version needs).

    kind = choose_kind(since_anchor, anchor_every, delta_bytes, full_bytes, max_share)   # "anchor" | "delta"
    chain = chain_to_anchor(version, lookup)        # [anchor, ..., version]
    for rec in to_build(version, lookup, cached):   # what a host builds: from its newest cached copy on the chain
        ...                                         # (registry/shipping.py: each anchor or delta verified)

`lookup(version)` gives a version's `Stored` record (its parent and how its served weights are stored); `cached(v)`
whether a host has v's weights already. Pure: the registry and retention supply the lookups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from registry.delta import DeltaMismatch

ANCHOR, DELTA = "anchor", "delta"


@dataclass(frozen=True)
class Stored:
    version: str
    parent: str | None      # the version a delta is taken against (None for an anchor without one)
    kind: str               # ANCHOR: the whole served weights; DELTA: a delta against `parent`


def choose_kind(since_anchor: int, anchor_every: int, delta_bytes: int | None, full_bytes: int,
                max_share: float) -> str:
    """How a new version is stored. `since_anchor`: deltas between its parent and the parent's anchor (0 when the
    parent is one). An anchor when there is no parent to take a delta against (`delta_bytes` None), when the
    chain would reach `anchor_every` versions from its anchor, or when the delta exceeds `max_share` of the whole."""
    if anchor_every < 1:
        raise ValueError(f"anchor_every must be at least 1, not {anchor_every}")
    if delta_bytes is None or since_anchor + 1 >= anchor_every:
        return ANCHOR
    return DELTA if delta_bytes <= max_share * full_bytes else ANCHOR


def walk(version: str, lookup: Callable[[str], Stored], limit: int = 10_000) -> Iterator[Stored]:
    """The records from `version` back to the nearest anchor, newest first, each yielded as it is looked up;
    DeltaMismatch where the chain loops, needs a version with no stored weights, or holds a malformed record
    (after the records before it)."""
    seen: set[str] = set()
    current = version
    while True:
        if current in seen or len(seen) >= limit:
            raise DeltaMismatch(f"version {version}: its delta chain loops back to version {current}")
        seen.add(current)
        try:
            rec = lookup(current)
        except LookupError:
            raise DeltaMismatch(f"version {version}: its delta chain needs version {current}, which has no stored "
                                "weights") from None
        yield rec
        if rec.kind == ANCHOR:
            return
        if rec.kind != DELTA or rec.parent is None:
            raise DeltaMismatch(f"version {current}: stored as {rec.kind!r} with parent {rec.parent!r}")
        current = rec.parent


def chain_to_anchor(version: str, lookup: Callable[[str], Stored], limit: int = 10_000) -> list[Stored]:
    """[the nearest anchor, ..., `version`]: the records a rebuild of `version` reads, oldest first."""
    return list(walk(version, lookup, limit))[::-1]


def to_build(version: str, lookup: Callable[[str], Stored], cached: Callable[[str], bool]) -> list[Stored]:
    """The records to build, oldest first, so that `version` exists on a host: back from it to the newest version
    on its chain the host has (`cached`, not built again) or else to its anchor. [] when `version` is cached."""
    pending = []
    for rec in walk(version, lookup):
        if cached(rec.version):
            break
        pending.append(rec)
    return pending[::-1]
