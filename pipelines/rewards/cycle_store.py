"""A reward cycle's state under the rewards root (a path or an object-store URL, schemas.storage; every write atomic):

    <root>/cycles/<cycle_id>.json               the manifest: the fixed range, status "started" | "done"
    <root>/cycles/LATEST_DONE                   {"cycle_id", "seq"} of the done cycle with the highest sequence
                                                number, rewritten (atomically) when a later one is saved done: the
                                                next range's start and the cadence's count read one manifest
    <root>/cycles/results/<cycle_id>.json       the Beam job's summary
    <root>/carry/<cycle_id>/<type>.parquet      the open join state the cycle hands to the next one
    <root>/dead_letter/<cycle_id>.parquet       its dead letters

No Beam here: the orchestrator's housekeeping reads and prunes this state without loading the pipeline
(pipelines.rewards.carry); pipelines.rewards.cycle_job runs the cycle over it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from schemas import storage
from schemas.storage import Location

LATEST_DONE = "LATEST_DONE"      # the pointer to the newest done cycle (not a manifest: no .json)


@dataclass
class CycleManifest:
    cycle_id: str
    seq: int
    status: str                      # "started" | "done"
    previous: str | None
    range: dict                      # FixedRange as a dict
    after: str | None                # rows maturing by then were emitted by earlier cycles (ISO)
    as_of: str | None                # rows maturing by then are emitted by this cycle (ISO)
    spec_version: str
    partitions: list = field(default_factory=list)
    counters: dict = field(default_factory=dict)


class CycleStore:
    """The cycle job's state under `root` (a path or an object-store URL, schemas.storage): manifests, results,
    carried join state and dead letters."""

    def __init__(self, root: Location):
        self.root = storage.normalize(root)

    def manifest_path(self, cycle_id: str) -> Location:
        return storage.join(self.root, "cycles", f"{cycle_id}.json")

    def dead_letter_path(self, cycle_id: str) -> Location:
        return storage.join(self.root, "dead_letter", f"{cycle_id}.parquet")

    def result_path(self, cycle_id: str) -> Location:
        return storage.join(self.root, "cycles", "results", f"{cycle_id}.json")

    def carry_dir(self, cycle_id: str) -> Location:
        return storage.join(self.root, "carry", cycle_id)

    def carry_files(self, cycle_id: str) -> list[str]:
        return [str(f.loc) for f in storage.list_files(self.carry_dir(cycle_id), "*.parquet", recursive=False)]

    def load(self, cycle_id: str) -> CycleManifest | None:
        p = self.manifest_path(cycle_id)
        return CycleManifest(**json.loads(storage.read_text(p))) if storage.exists(p) else None

    def manifests(self) -> list[CycleManifest]:
        return [CycleManifest(**json.loads(storage.read_text(f.loc)))
                for f in storage.list_files(storage.join(self.root, "cycles"), "*.json", recursive=False)]

    def latest_done(self) -> CycleManifest | None:
        """The done cycle with the highest sequence number, through the LATEST_DONE pointer (one small read and the
        manifest); a store without the pointer, or whose pointer names a manifest that is gone or not done, is
        listed once and the pointer written."""
        pointer = self._pointer()
        m = self.load(pointer["cycle_id"]) if pointer else None
        if m is not None and m.status == "done":
            return m
        done = [m for m in self.manifests() if m.status == "done"]
        latest = max(done, key=lambda m: m.seq) if done else None
        if latest is not None:
            self._point_to(latest)
        return latest

    def save(self, m: CycleManifest) -> None:
        storage.write_text(self.manifest_path(m.cycle_id), json.dumps(asdict(m), indent=2, sort_keys=True))
        if m.status == "done":
            pointer = self._pointer()
            if pointer is None or m.seq > pointer["seq"]:
                self._point_to(m)

    def _pointer(self) -> dict | None:
        p = storage.join(self.root, "cycles", LATEST_DONE)
        return json.loads(storage.read_text(p)) if storage.exists(p) else None

    def _point_to(self, m: CycleManifest) -> None:
        storage.write_text(storage.join(self.root, "cycles", LATEST_DONE),
                           json.dumps({"cycle_id": m.cycle_id, "seq": m.seq}))

    def carried(self) -> list[str]:
        """The cycle ids that have a carry folder."""
        return storage.list_dirs(storage.join(self.root, "carry"))

    def remove_carry(self, cycle_id: str) -> None:
        storage.delete_tree(self.carry_dir(cycle_id))
