"""The reward cycles' newest done manifest is one read of a pointer, whatever the number of cycles: the next range's
start (`plan`) and the cadence's count of mature requests find it without listing every manifest."""

from __future__ import annotations

from pipelines.rewards.cycle_store import LATEST_DONE, CycleManifest, CycleStore


def manifest(cid: str, seq: int, status: str = "done") -> CycleManifest:
    return CycleManifest(cid, seq, status, None, {"stop": {}}, None, None, "v1")


def test_the_newest_done_cycle_is_read_through_its_pointer_without_listing_the_manifests(tmp_path, monkeypatch):
    store = CycleStore(tmp_path)
    for i in (1, 2, 3):
        store.save(manifest(f"c{i}", i))
    store.save(manifest("c4", 4, "started"))              # in flight: not the newest done
    store.save(manifest("c2", 2))                          # an older one saved again does not move it

    def listed():
        raise AssertionError("every manifest was read")

    monkeypatch.setattr(CycleStore, "manifests", lambda self: listed())
    assert store.latest_done().cycle_id == "c3"
    store.save(manifest("c4", 4))
    assert store.latest_done().cycle_id == "c4"


def test_a_store_without_the_pointer_is_listed_once_and_gets_one(tmp_path):
    store = CycleStore(tmp_path)
    assert store.latest_done() is None
    for i in (1, 2):
        store.save(manifest(f"c{i}", i))
    (tmp_path / "cycles" / LATEST_DONE).unlink()            # a store written before the pointer existed
    assert store.latest_done().cycle_id == "c2" and (tmp_path / "cycles" / LATEST_DONE).exists()
    assert [m.cycle_id for m in store.manifests()] == ["c1", "c2"], "the pointer is not a manifest"
