"""Carry folders of committed cycles are removed: once a cycle is done, the carries its predecessors handed on are
read and gone; its own stays for the next cycle, and a carry a cycle in flight may read is kept."""

from __future__ import annotations

import polars as pl

from pipelines.rewards.carry import consumed_carries, prune_carries
from pipelines.rewards.cycle_store import CycleManifest, CycleStore
from schemas import storage


def manifest(cid: str, seq: int, status: str = "done") -> CycleManifest:
    return CycleManifest(cid, seq, status, f"c{seq - 1}" if seq > 1 else None, {}, None, None, "v1")


def carried_cycle(store: CycleStore, cid: str, seq: int, status: str = "done") -> None:
    """Cycle `cid`'s manifest and the carry it wrote (one Parquet file, as the reward job writes it)."""
    store.save(manifest(cid, seq, status))
    frame = pl.DataFrame({"event_id": [f"{cid}-e1"], "event_time": [seq]})
    storage.write_parquet(storage.join(store.carry_dir(cid), "trajectory.parquet"), frame.to_arrow())


def test_only_done_cycles_before_the_finished_one_have_consumed_carries():
    done = {f"c{i}": manifest(f"c{i}", i) for i in range(1, 4)}
    assert consumed_carries(done["c3"], done) == ["c1", "c2"]
    assert consumed_carries(manifest("c4", 4, "started"), done) == [], "a cycle in flight consumes nothing yet"
    assert consumed_carries(None, done) == [], "no reward cycle (traffic from files)"
    assert consumed_carries(done["c3"], {**done, "c0": None}) == ["c1", "c2"], "a carry of no known cycle stays"


def test_after_a_done_cycle_the_carries_before_it_are_removed_and_its_own_is_kept(tmp_path):
    store = CycleStore(tmp_path)
    for i in range(1, 4):
        carried_cycle(store, f"c{i}", i)
    assert prune_carries(store, "c3") == ["c1", "c2"]
    assert store.carried() == ["c3"] and store.carry_files("c3"), "the next cycle reads c3's carry"
    assert prune_carries(store, "c3") == [], "pruning again removes nothing"
    assert store.load("c1") is not None, "manifests stay: only the carried join state goes"


def test_a_cycle_that_is_not_done_removes_nothing(tmp_path):
    store = CycleStore(tmp_path)
    carried_cycle(store, "c1", 1)
    carried_cycle(store, "c2", 2, status="started")       # its Beam job crashed: it reads c1's carry when resumed
    assert prune_carries(store, "c2") == [] and store.carried() == ["c1", "c2"]
    assert prune_carries(store, "c9") == [], "a cycle the reward job never ran"
