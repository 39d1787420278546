"""Which carried join state no cycle reads any more, and its removal.

A cycle's carry (`<rewards root>/carry/<cycle_id>/`) is read by the one cycle after it: the next cycle's range is
planned after the newest done cycle (`cycle_job.plan`) and reads that cycle's carry. Once a cycle is done, every
carry of a done cycle before it has been read by its successor, and no later cycle can plan after it any more (one
range at a time: the orchestrator resumes a failed cycle before it starts another). So, after cycle `finished` is
done, the carries of done cycles with a lower sequence number are removed; its own stays for the next cycle. A
carry whose cycle's manifest is missing or not done is kept (nothing is known about who reads it).

    removed = prune_carries(CycleStore(cfg.rewards_root()), "c7")     # ["c5", "c6"]

Reads the manifests of the cycles that still have a carry, not every manifest: after each cycle that is one or two.
"""

from __future__ import annotations

from pipelines.rewards.cycle_store import CycleManifest, CycleStore


def consumed_carries(finished: CycleManifest | None, carried: dict[str, CycleManifest | None]) -> list[str]:
    """The carries in `carried` (cycle id -> its manifest) that nothing reads once `finished` is done: those of done
    cycles before it. None when `finished` has no manifest or is not done."""
    if finished is None or finished.status != "done":
        return []
    return sorted(cid for cid, m in carried.items()
                  if cid != finished.cycle_id and m is not None and m.status == "done" and m.seq < finished.seq)


def prune_carries(store: CycleStore, finished_id: str) -> list[str]:
    """Remove the carries that nothing reads once cycle `finished_id` is done (`consumed_carries`); their ids."""
    carried = {cid: store.load(cid) for cid in store.carried()}
    gone = consumed_carries(store.load(finished_id), carried)
    for cid in gone:
        store.remove_carry(cid)
    return gone
