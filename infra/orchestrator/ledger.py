"""The cycle ledger: what each cycle did, one JSON file per cycle id, written atomically after every step.

    <state_dir>/orchestrator/cycles/<cycle_id>.json
      {"cycle_id", "seq", "started_at" (orchestrator clock), "started_wall", "status", "error",
       "steps": {"collect": {"status": "done", "result": {...}, "seconds": 1.2}, ...},
       "settings": ["trainer.max_rows=512", ...]}

settings: config overrides the cycle's steps run with, on top of the orchestrator's (the demo sizes its later cycles
to its time budget this way, infra.orchestrator.budget); fixed when the cycle starts, so a resumed cycle runs the
rest of its steps as it began them.

status: running (steps left to do; `runner_pid` is the process doing them), done, failed (a step raised;
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

    def done(self, step: str) -> bool:
        return self.steps.get(step, {}).get("status") == DONE

    def result(self, step: str) -> dict:
        return self.steps.get(step, {}).get("result", {})


class Ledger:
    def __init__(self, state_path: Path):
        self.root = Path(state_path) / "orchestrator" / "cycles"

    def path(self, cycle_id: str) -> Path:
        if not cycle_id or "/" in cycle_id or cycle_id.startswith("."):
            raise ValueError(f"bad cycle id {cycle_id!r}: a plain name like c7")
        return self.root / f"{cycle_id}.json"

    def load(self, cycle_id: str) -> CycleRecord | None:
        p = self.path(cycle_id)
        return CycleRecord(**json.loads(p.read_text())) if p.exists() else None

    def save(self, rec: CycleRecord) -> None:
        p = self.path(rec.cycle_id)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        with open(tmp, "w") as f:
            json.dump(asdict(rec), f, indent=2)  # steps keep their order
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)

    def all(self) -> list[CycleRecord]:
        """Every cycle, oldest first (by sequence number)."""
        if not self.root.exists():
            return []
        recs = [CycleRecord(**json.loads(p.read_text())) for p in self.root.glob("*.json")]
        return sorted(recs, key=lambda r: r.seq)

    def begin(self, cycle_id: str, now: datetime, wall: float, settings: list[str] | None = None) -> CycleRecord:
        """The record of `cycle_id`: the existing one (resumed: status back to running; its settings stay those it
        started with), or a new one with `settings`."""
        rec = self.load(cycle_id)
        if rec is None:
            seq = max((r.seq for r in self.all()), default=0) + 1
            rec = CycleRecord(cycle_id, seq, now.isoformat(), wall, settings=list(settings or []))
        elif rec.status in (DONE, BLOCKED):
            return rec
        rec.status, rec.error, rec.runner_pid = RUNNING, "", os.getpid()
        self.save(rec)
        return rec

    def next_id(self) -> str:
        return next_cycle_id(self.all())


def next_cycle_id(records: list[CycleRecord]) -> str:
    """The id after the highest sequence number so far: c1, c2, ..."""
    return f"c{max((r.seq for r in records), default=0) + 1}"
