"""The cycle ledger: what each cycle did, one JSON object per cycle id, written atomically after every step.

    <ledger root>/<cycle_id>.json      root: orchestrator.ledger, default <state_dir>/orchestrator/cycles; an
                                       object-store URL (s3://bucket/ledger) for an orchestrator whose runs execute
                                       on several hosts (through `schemas.storage`)
      {"cycle_id", "seq", "started_at" (orchestrator clock), "started_wall", "status", "error",
       "steps": {"collect": {"status": "done", "result": {...}, "seconds": 1.2}, ...},
       "settings": ["trainer.max_rows=512", ...], "dagster_run_id": "..."}

settings: config overrides the cycle's steps run with, on top of the orchestrator's (the demo sizes its later cycles
to its time budget this way, infra.orchestrator.budget); fixed when the cycle starts, so a resumed cycle runs the
rest of its steps as it began them.

status: running (steps left to do; `dagster_run_id` is the Dagster run doing them, whose status in the instance says
whether it still runs; `runner_pid` is kept for a cycle run outside Dagster), done, failed (a step raised;
rerunning the cycle resumes at that step) or blocked (finished without a candidate: the data-quality suite failed
or the trainer refused the data; not retried). A step recorded done is never run again; a step that
ran but crashed before it was recorded is run again, which is why every step's own work is idempotent by cycle id.
The cadence reads the ledger: the last cycle's start time, and whether one is still running.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from schemas import storage

RUNNING, DONE, FAILED, BLOCKED = "running", "done", "failed", "blocked"


@dataclass
class CycleRecord:
    cycle_id: str
    seq: int
    started_at: str                  # orchestrator clock (ISO)
    started_wall: float
    status: str = RUNNING
    error: str = ""
    finished_wall: float | None = None
    runner_pid: int | None = None
    steps: dict[str, dict] = field(default_factory=dict)
    settings: list[str] = field(default_factory=list)   # `--set` overrides its steps run with (chosen at its start)
    dagster_run_id: str | None = None                   # the Dagster run executing it (None: run outside Dagster)

    def done(self, step: str) -> bool:
        return self.steps.get(step, {}).get("status") == DONE

    def result(self, step: str) -> dict:
        return self.steps.get(step, {}).get("result", {})


class Ledger:
    def __init__(self, state_path: Path, root: str | Path | None = None):
        """The ledger at `root` (a folder or an object-store URL), default `<state_path>/orchestrator/cycles`."""
        self.root = storage.normalize(root) if root else Path(state_path) / "orchestrator" / "cycles"

    @classmethod
    def for_config(cls, cfg) -> "Ledger":
        """The ledger of a configuration: `orchestrator.ledger`, else the one in its state dir."""
        return cls(cfg.state_path, cfg.orchestrator.ledger or None)

    def path(self, cycle_id: str) -> Path | str:
        if not cycle_id or "/" in cycle_id or cycle_id.startswith("."):
            raise ValueError(f"bad cycle id {cycle_id!r}: a plain name like c7")
        return storage.join(self.root, f"{cycle_id}.json")

    def load(self, cycle_id: str) -> CycleRecord | None:
        p = self.path(cycle_id)
        return _record(storage.read_text(p)) if storage.exists(p) else None

    def save(self, rec: CycleRecord) -> None:
        # atomic: a local temp file, fsync and rename; one upload in an object store (steps keep their order)
        storage.write_text(self.path(rec.cycle_id), json.dumps(asdict(rec), indent=2))

    def all(self) -> list[CycleRecord]:
        """Every cycle, oldest first (by sequence number)."""
        files = storage.list_files(self.root, "*.json", recursive=False)
        recs = [_record(storage.read_text(f.loc)) for f in files if not f.rel.startswith(".")]
        return sorted(recs, key=lambda r: r.seq)

    def begin(self, cycle_id: str, now: datetime, wall: float, settings: list[str] | None = None,
              dagster_run_id: str | None = None) -> CycleRecord:
        """The record of `cycle_id`: the existing one (resumed: status back to running; its settings stay those it
        started with), or a new one with `settings`. `dagster_run_id`: the Dagster run that executes it now."""
        rec = self.load(cycle_id)
        if rec is None:
            seq = max((r.seq for r in self.all()), default=0) + 1
            rec = CycleRecord(cycle_id, seq, now.isoformat(), wall, settings=list(settings or []))
        elif rec.status in (DONE, BLOCKED):
            return rec
        rec.status, rec.error, rec.runner_pid = RUNNING, "", os.getpid()
        rec.dagster_run_id = dagster_run_id
        self.save(rec)
        return rec

    def next_id(self) -> str:
        return next_cycle_id(self.all())


def _record(text: str) -> CycleRecord:
    fields = set(CycleRecord.__dataclass_fields__)
    return CycleRecord(**{k: v for k, v in json.loads(text).items() if k in fields})


def next_cycle_id(records: list[CycleRecord]) -> str:
    """The id after the highest sequence number so far: c1, c2, ..."""
    return f"c{max((r.seq for r in records), default=0) + 1}"
