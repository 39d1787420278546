"""`rtrl bench weights`' account of what a lineage stores once retention has run: masters for what may be rolled
back to or trained from, served weights alone for the links of a kept version's delta chain."""

from __future__ import annotations

from infra.bench.weights import stored_under_retention


def _lineage(n: int, anchor_every: int = 8) -> dict[str, dict[str, str]]:
    """v1..vn as shipping tags them: an anchor every `anchor_every` versions, deltas between (100 bytes against
    an anchor's 1,000)."""
    tags = {}
    for v in range(1, n + 1):
        anchor = (v - 1) % anchor_every == 0
        tags[str(v)] = {"served.kind": "anchor" if anchor else "delta", "served.parent": "" if anchor else str(v - 1),
                        "served.bytes": "1000" if anchor else "100"}
    return tags


def test_ten_versions_keep_masters_for_the_rollback_chain_and_served_weights_alone_for_older_links():
    got = stored_under_retention(_lineage(10), keep_promoted=5, master_bytes=10_000)
    # champion v10 and its 5 rollbacks v9..v5 (and the anchor v0, here v1) keep their masters; v5..v8 are rebuilt
    # through v4, v3, v2 back to v1: those keep their served deltas alone
    assert got["masters_kept"] == ["1", "5", "6", "7", "8", "9", "10"]
    assert got["served_only"] == ["2", "3", "4"] and got["deleted"] == []
    assert got["served_bytes"] == 1000 + 100 * 7 + 1000 + 100 and got["master_bytes"] == 70_000
    assert got["bytes"] == got["served_bytes"] + got["master_bytes"]


def test_versions_no_chain_or_rollback_reaches_are_deleted_whole():
    got = stored_under_retention(_lineage(12, anchor_every=4), keep_promoted=1, master_bytes=10_000)
    # v12 (champion) and v11 (rollback): chain v11 -> v10 -> v9 (anchor); v1 stays as the anchor v0
    assert got["masters_kept"] == ["1", "11", "12"] and got["served_only"] == ["9", "10"]
    assert got["deleted"] == ["2", "3", "4", "5", "6", "7", "8"]
