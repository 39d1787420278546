"""Delta chains (registry/delta_chain.py): anchors every N versions and for large deltas, rebuilding any version
from its nearest anchor, and what retention must keep for a kept version to be rebuilt."""

from __future__ import annotations

import numpy as np
import pytest

from registry.delta import DeltaMismatch, Tensor, apply, encode
from registry.delta_chain import ANCHOR, DELTA, Stored, chain_to_anchor, choose_kind, to_build


def test_an_anchor_starts_a_lineage_comes_every_n_versions_and_replaces_a_large_delta():
    assert choose_kind(0, 4, None, 1000, 0.5) == ANCHOR            # no parent
    assert choose_kind(0, 4, 10, 1000, 0.5) == DELTA
    assert choose_kind(2, 4, 10, 1000, 0.5) == DELTA
    assert choose_kind(3, 4, 10, 1000, 0.5) == ANCHOR               # the 4th from the anchor
    assert choose_kind(0, 4, 501, 1000, 0.5) == ANCHOR              # more than half the whole
    assert choose_kind(0, 1, 10, 1000, 0.5) == ANCHOR               # every version whole
    with pytest.raises(ValueError):
        choose_kind(0, 0, 10, 1000, 0.5)


class Lineage:
    """Ten versions, each a small step from its parent, stored as the chain rules say (anchor every 4)."""

    def __init__(self, versions: int = 10, anchor_every: int = 4):
        rng = np.random.default_rng(0)
        bits = rng.integers(0, 2**16, 4096, dtype=np.uint16)
        self.weights, self.records, self.anchors, self.deltas = {}, {}, {}, {}
        since = 0
        for v in range(1, versions + 1):
            bits = bits.copy()
            bits[rng.integers(0, bits.size, 40)] ^= 1
            w = {"w": Tensor("BF16", (64, 64), bits.tobytes())}
            parent = str(v - 1) if v > 1 else None
            delta = encode(self.weights[parent], w) if parent else None
            kind = choose_kind(since, anchor_every, delta.stored_bytes if delta else None, 8192, 0.5)
            self.records[str(v)] = Stored(str(v), parent, kind)
            if kind == ANCHOR:
                self.anchors[str(v)], since = w, 0
            else:
                self.deltas[str(v)], since = delta, since + 1
            self.weights[str(v)] = w

    def lookup(self, v: str) -> Stored:
        if v not in self.records:
            raise LookupError(v)
        return self.records[v]

    def rebuild(self, v: str, host: dict | None = None):
        """`v` built on a host holding `host`'s weights (default none) as registry.shipping does: the records
        `to_build` names, oldest first, each anchor read and each delta applied (verified) to its parent's."""
        host = {} if host is None else host
        for rec in to_build(v, self.lookup, host.__contains__):
            host[rec.version] = (self.anchors[rec.version] if rec.kind == ANCHOR
                                 else apply(host[rec.parent], self.deltas[rec.version]))
        return host[v]


def test_every_version_of_a_lineage_is_rebuilt_bit_for_bit_from_its_nearest_anchor():
    lin = Lineage()
    assert [lin.records[str(v)].kind for v in range(1, 11)] == [ANCHOR, DELTA, DELTA, DELTA] * 2 + [ANCHOR, DELTA]
    for v in range(1, 11):
        assert lin.rebuild(str(v)) == lin.weights[str(v)]
        assert len(chain_to_anchor(str(v), lin.lookup)) <= 4       # at most anchor_every - 1 deltas to apply


def test_a_corrupted_delta_in_the_middle_of_a_chain_fails_every_version_built_through_it():
    lin = Lineage()
    bad = lin.deltas["6"]
    payload = bytearray(bad.payload)
    payload[len(payload) // 2] ^= 0xFF
    bad.payload = bytes(payload)
    with pytest.raises(DeltaMismatch):      # (registry/shipping.py names the version: test_shipping.py)
        lin.rebuild("7")
    assert lin.rebuild("5") == lin.weights["5"]                     # a chain that does not pass through it


def test_a_chain_with_a_missing_version_or_a_loop_is_refused():
    lin = Lineage()
    del lin.records["6"]
    with pytest.raises(DeltaMismatch, match="needs version 6"):
        chain_to_anchor("7", lin.lookup)
    loop = {"a": Stored("a", "b", DELTA), "b": Stored("b", "a", DELTA)}
    with pytest.raises(DeltaMismatch, match="loops"):
        chain_to_anchor("a", loop.__getitem__)


def test_a_versions_chain_names_every_version_it_is_rebuilt_through():
    lin = Lineage()
    needed = lambda kept: {rec.version for v in kept for rec in chain_to_anchor(v, lin.lookup)}  # noqa: E731
    assert needed({"7", "10"}) == {"5", "6", "7", "9", "10"}
    assert needed({"1"}) == {"1"}
    assert needed(set()) == set()


def test_a_host_builds_only_from_the_newest_copy_it_has_on_the_chain():
    lin = Lineage()
    assert [r.version for r in to_build("8", lin.lookup, lambda v: False)] == ["5", "6", "7", "8"]
    assert [r.version for r in to_build("8", lin.lookup, {"5", "6"}.__contains__)] == ["7", "8"]
    assert to_build("8", lin.lookup, {"8"}.__contains__) == []
    host = {"6": lin.weights["6"]}
    assert lin.rebuild("8", host) == lin.weights["8"] and sorted(host) == ["6", "7", "8"]
