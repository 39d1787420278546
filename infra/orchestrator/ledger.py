"""The cycle ledger: what each cycle did, one JSON object per cycle id, written atomically after every step.

    <ledger root>/<cycle_id>.json      root: orchestrator.ledger, default <state_dir>/orchestrator/cycles; an
                                       object-store URL (s3://bucket/ledger) for an orchestrator whose runs execute
                                       on several hosts (through `schemas.storage`)
      {"cycle_id", "seq", "started_at" (orchestrator clock), "started_wall", "status", "error",
       "steps": {"collect": {"status": "done", "result": {...}, "seconds": 1.2}, ...},
       "settings": ["trainer.max_rows=512", ...], "dagster_run_id": "...",
       "failures": [{"at", "step", "error"}, ...], "failures_total": 3,
       "current": {"step": "train", "pid": 4242, "since_wall": ...} (the step running now, in which process; null
                  between steps; a process killed mid-step leaves it, and the next run of the cycle replaces it)}
    <ledger root>/LATEST               {"cycle_id", "seq"} of the cycle with the highest sequence number, rewritten
                                       (atomically) when a record with a higher one is saved: `latest()` reads one
                                       pointer and one record, whatever the ledger's length

settings: config overrides the cycle's steps run with, on top of the orchestrator's (the demo sizes its later cycles
to its time budget this way, infra.orchestrator.budget); fixed when the cycle starts, so a resumed cycle runs the
rest of its steps as it began them.

status: running (steps left to do; `dagster_run_id` is the Dagster run doing them, whose status in the instance says
whether it still runs; `runner_pid` is kept for a cycle run outside Dagster), done, failed (a step raised, or its
runner died; rerunning the cycle resumes at that step, after the backoff of infra.orchestrator.backoff), stuck
(`orchestrator.max_failures` failures in a row: not retried until an operator clears it, `rtrl cycle ID --unstick`
or `--retry`) or blocked (finished without a candidate: the data-quality suite failed or the trainer refused the
data; not retried). A step recorded done is never run again; a step that ran but crashed before it was recorded is
run again, which is why every step's own work is idempotent by cycle id.

failures: the cycle's failures in a row (orchestrator clock), cleared when a step finishes or an operator clears
them; failures_total counts every failure it had. The cadence reads the latest record: its start time, whether it
still runs, and its failures.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from schemas import storage

RUNNING, DONE, FAILED, BLOCKED, STUCK = "running", "done", "failed", "blocked", "stuck"
LATEST = "LATEST"       # the pointer to the cycle with the highest sequence number (not a cycle: no .json)


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
    failures: list[dict] = field(default_factory=list)  # in a row: {"at" (orchestrator clock), "step", "error"}
    failures_total: int = 0                             # every failure it had
    current: dict | None = None                         # the step running now: {"step", "pid", "since_wall"}

    def done(self, step: str) -> bool:
        return self.steps.get(step, {}).get("status") == DONE

    def result(self, step: str) -> dict:
        return self.steps.get(step, {}).get("result", {})

    def failure_times(self) -> list[datetime]:
        return [datetime.fromisoformat(f["at"]) for f in self.failures]


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
        return _read_record(p) if storage.exists(p) else None

    def save(self, rec: CycleRecord) -> None:
        # atomic: a local temp file, fsync and rename; one upload in an object store (steps keep their order)
        storage.write_text(self.path(rec.cycle_id), json.dumps(asdict(rec), indent=2))
        pointer = self._pointer()
        if pointer is None or (rec.seq >= pointer["seq"] and rec.cycle_id != pointer["cycle_id"]):
            self._point_to(rec)

    def _pointer(self) -> dict | None:
        p = storage.join(self.root, LATEST)
        return _read_json(p) if storage.exists(p) else None

    def _point_to(self, rec: CycleRecord) -> None:
        storage.write_text(storage.join(self.root, LATEST), json.dumps({"cycle_id": rec.cycle_id, "seq": rec.seq}))

    def latest(self) -> CycleRecord | None:
        """The cycle with the highest sequence number, through the LATEST pointer: one small read and the record,
        however many cycles the ledger holds. A ledger without the pointer (written before it existed), or whose
        pointer names a record that is gone, is listed once and the pointer written."""
        pointer = self._pointer()
        rec = self.load(pointer["cycle_id"]) if pointer else None
        if rec is not None:
            return rec
        records = self.all()
        if records:
            self._point_to(records[-1])
        return records[-1] if records else None

    def all(self) -> list[CycleRecord]:
        """Every cycle, oldest first (by sequence number): for history views; `latest()` for the last one."""
        files = storage.list_files(self.root, "*.json", recursive=False)
        recs = [_read_record(f.loc) for f in files if not f.rel.startswith(".")]
        return sorted(recs, key=lambda r: r.seq)

    def begin(self, cycle_id: str, now: datetime, wall: float, settings: list[str] | None = None,
              dagster_run_id: str | None = None) -> CycleRecord:
        """The record of `cycle_id`: the existing one (resumed: status back to running; its settings stay those it
        started with), or a new one with `settings`. `dagster_run_id`: the Dagster run that executes it now."""
        rec = self.load(cycle_id)
        if rec is None:
            last = self.latest()
            rec = CycleRecord(cycle_id, (last.seq if last else 0) + 1, now.isoformat(), wall,
                              settings=list(settings or []))
        elif rec.status in (DONE, BLOCKED, STUCK):
            return rec
        rec.status, rec.error, rec.runner_pid = RUNNING, "", os.getpid()
        rec.dagster_run_id = dagster_run_id
        self.save(rec)
        return rec

    def next_id(self) -> str:
        last = self.latest()
        return next_cycle_id([last] if last else [])

    def record_failure(self, rec: CycleRecord, at: datetime, step: str | None, error: str,
                       max_failures: int) -> CycleRecord:
        """One more failure in a row of `rec` (a step that raised, a runner that died) at `at`: the cycle is failed,
        or stuck once it has `max_failures` of them. Saved."""
        rec.failures.append({"at": at.isoformat(), "step": step, "error": error[:500]})
        rec.failures_total += 1
        rec.error = error[:4000]
        rec.status = STUCK if len(rec.failures) >= max_failures else FAILED
        self.save(rec)
        return rec

    def unstick(self, cycle_id: str) -> CycleRecord:
        """An operator's clearing of a stuck (or failed) cycle's failures in a row: it is failed, with no backoff
        left, so the cadence (or `rtrl cycle ID`) runs it again at once. ValueError for a cycle that is neither."""
        rec = self.load(cycle_id)
        if rec is None or rec.status not in (STUCK, FAILED):
            raise ValueError(f"cycle {cycle_id} is {rec.status if rec else 'not in the ledger'}: only a stuck or "
                             "failed cycle is cleared")
        rec.status, rec.failures = FAILED, []
        self.save(rec)
        return rec


def _read_json(loc) -> dict:
    """The JSON object at `loc`: each save replaces it whole, and a read gets one whole version of it
    (`storage.read_bytes`: one GetObject on S3)."""
    return json.loads(storage.read_text(loc))


def _read_record(loc) -> CycleRecord:
    return _record_of(_read_json(loc))


def _record_of(d: dict) -> CycleRecord:
    fields = set(CycleRecord.__dataclass_fields__)
    return CycleRecord(**{k: v for k, v in d.items() if k in fields})


def next_cycle_id(records: list[CycleRecord]) -> str:
    """The id after the highest sequence number so far: c1, c2, ..."""
    return f"c{max((r.seq for r in records), default=0) + 1}"
