"""`rtrl archive import`: build (or add to) an archive from wire-format JSON lines, without Kafka.

Input: one event per line in the wire format of `schemas/wire.py` (what the SDK sends and the collector produces
to Kafka: a JSON object carrying its own `event_type` and `schema_version`). A path may be a file or a directory,
read recursively (`*.jsonl`, `*.ndjson`, `*.json`, each optionally `.gz`; every such file is read as JSON lines),
files in sorted path order. Blank lines are skipped.

Each line is validated exactly as the archiver validates a Kafka message (`schemas.parse_wire`): older schema
versions are upgraded to the current one (`schemas/compat.py`), a bad line becomes a dead letter with its file,
line number, reason code (the archiver's vocabulary, `pipelines.archive.deadletter`), field and the validator's
words. Dead letters go to a JSON-lines file; valid events go to committed archive files (`importer.import_frames`)
under the import's own cluster id, `import-<UTC time>-<random>`, so imports never overwrite each other or the
archiver's batches. A second copy of an `event_id` within one import is dropped and counted (readers also dedupe
across the whole archive).

`received_time`: an event that carries one keeps it. One without (an export from before the collector stamped it,
a hand-written log) is imported as received at its `event_time`: the archive then says it arrived on time, which
is what a replay (which decides lateness from `received_time`) will assume. The summary counts those events.

The import holds the archive root's lock (`_archiver.lock`; a lease for an object-store root) while it writes: it
refuses to run beside an archiver on the same root, whose start-up recovery would delete a batch in flight.

The archive root (and the dead-letter file) may be an object-store URL (`s3://bucket/archive`,
`schemas.storage`); the input files are local. Dead letters bound for an object store are kept in memory and
uploaded as one object at the end.
"""

from __future__ import annotations

import gzip
import io
import json
import secrets
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Iterator

import polars as pl

from pipelines.archive.deadletter import reason_code
from pipelines.archive.layout import IMPORTS_DIR
from pipelines.archive.importer import import_frames
from pipelines.archive.lock import RootLock
from schemas import Event, SchemaError, parse_wire, storage, to_arrow

SUFFIXES = (".jsonl", ".ndjson", ".json")
RAW_KEPT = 4096  # characters of a bad line kept in its dead letter


def is_input_file(p: Path) -> bool:
    name = p.name.lower()
    return name.endswith(SUFFIXES) or name.endswith(tuple(s + ".gz" for s in SUFFIXES))


def input_files(path: str | Path) -> list[Path]:
    """The files an import of `path` reads: the file itself, or a directory's JSON-lines files (recursively)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.is_file() and is_input_file(f))
    raise FileNotFoundError(f"{p}: no such file or directory")


def _open(p: Path) -> IO[bytes]:
    return gzip.open(p, "rb") if p.name.lower().endswith(".gz") else open(p, "rb")


def read_lines(p: Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its end of line) of every non-blank line of a (gzipped) file."""
    with _open(p) as fh:
        for n, line in enumerate(fh, 1):
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield n, line


@dataclass
class ImportSummary:
    archive: str
    import_id: str
    files: int = 0
    events_read: int = 0                    # non-blank lines read
    imported: dict[str, int] = field(default_factory=dict)  # per event type
    duplicates_dropped: int = 0             # a repeated event_id within this import
    dead_letters: int = 0
    dead_letters_by_reason: dict[str, int] = field(default_factory=dict)
    dead_letter_file: str | None = None     # written only when there are dead letters
    received_time_filled: int = 0           # events without received_time, imported as received at event_time
    event_time_min: str | None = None
    event_time_max: str | None = None
    current_file: str | None = None         # progress only

    @property
    def imported_total(self) -> int:
        return sum(self.imported.values())

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("current_file")
        return {**d, "imported_total": self.imported_total}


def new_import_id() -> str:
    return f"import-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


class _Batch:
    """Valid events buffered per type until `chunk_events`, then committed as one batch per topic."""

    def __init__(self, root: Path | str, import_id: str, summary: ImportSummary, chunk_events: int):
        self.root, self.import_id, self.summary, self.chunk = root, import_id, summary, chunk_events
        self.events: dict[str, list[Event]] = defaultdict(list)
        self.n = 0
        self.offsets: dict[str, int] = {}

    def add(self, e: Event) -> None:
        self.events[e.event_type].append(e)
        self.n += 1
        if self.n >= self.chunk:
            self.flush()

    def flush(self) -> None:
        if not self.n:
            return
        frames = {t: pl.from_arrow(to_arrow(evs, t)) for t, evs in self.events.items()}
        import_frames(self.root, frames, self.import_id, offsets=self.offsets)
        for t, evs in self.events.items():
            self.summary.imported[t] = self.summary.imported.get(t, 0) + len(evs)
        self.events.clear()
        self.n = 0


def import_wire(path: str | Path, root: str | Path, dead_letter_file: str | Path | None = None,
                import_id: str | None = None, chunk_events: int = 50_000,
                summary: ImportSummary | None = None) -> ImportSummary:
    """Import every event of `path` (a file or a directory) into the archive at `root`; see the module docstring.
    Pass `summary` to watch its counters from another thread (progress). Raises FileNotFoundError for a missing
    path, ArchiveError when an archiver holds the root."""
    files = input_files(path)
    root = storage.normalize(root)
    import_id = import_id or new_import_id()
    summary = summary or ImportSummary(str(root), import_id)
    summary.archive, summary.import_id, summary.files = str(root), import_id, len(files)
    dl_path = storage.normalize(dead_letter_file) if dead_letter_file else storage.join(
        root, IMPORTS_DIR, f"{import_id}.dead_letters.jsonl")
    reasons: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()      # (org_id, event_id): an event id is unique only within its org
    t_min = t_max = None
    lock = RootLock(root)
    lock.acquire()
    dl_fh: IO[str] | None = None
    try:
        batch = _Batch(root, import_id, summary, chunk_events)
        for f in files:
            summary.current_file = str(f)
            for line_no, raw in read_lines(f):
                summary.events_read += 1
                if summary.events_read % 1000 == 0:
                    lock.renew()  # an object-store root's lease (rate-limited; nothing for a local root)
                try:
                    event = parse_wire(raw)
                except SchemaError as err:
                    reason = reason_code(err)
                    reasons[reason] += 1
                    summary.dead_letters += 1
                    if dl_fh is None:
                        dl_fh = _dead_letter_writer(dl_path)
                    text = raw.decode("utf-8", errors="replace")
                    dl_fh.write(json.dumps({"file": str(f), "line": line_no, "reason": reason, "field": err.field,
                                            "detail": str(err), "raw": text[:RAW_KEPT],
                                            "raw_truncated": len(text) > RAW_KEPT}) + "\n")
                    continue
                if (event.org_id, event.event_id) in seen:
                    summary.duplicates_dropped += 1
                    continue
                seen.add((event.org_id, event.event_id))
                if event.received_time is None:
                    event.received_time = event.event_time
                    summary.received_time_filled += 1
                t_min = event.event_time if t_min is None else min(t_min, event.event_time)
                t_max = event.event_time if t_max is None else max(t_max, event.event_time)
                batch.add(event)
        batch.flush()
        if dl_fh is not None and storage.local_path(dl_path) is None:
            lock.renew()
            storage.write_text(dl_path, dl_fh.getvalue())  # an object: uploaded whole, at the end
    finally:
        if dl_fh is not None:
            dl_fh.close()
        lock.release()
    summary.current_file = None
    summary.dead_letters_by_reason = dict(sorted(reasons.items()))
    summary.dead_letter_file = str(dl_path) if summary.dead_letters else None
    summary.event_time_min = t_min.isoformat() if t_min else None
    summary.event_time_max = t_max.isoformat() if t_max else None
    summary.imported = dict(sorted(summary.imported.items()))
    if summary.imported_total:  # a record of what was imported, beside the manifests
        storage.write_text(storage.join(root, IMPORTS_DIR, f"{import_id}.json"),
                           json.dumps({**summary.as_dict(), "inputs": [str(f) for f in files]}, indent=1) + "\n")
    return summary


def _dead_letter_writer(loc: Path | str) -> IO[str]:
    """Where dead letters are written as they come: a local file, or (for an object-store location) memory,
    uploaded as one object when the import ends."""
    path = storage.local_path(loc)
    if path is None:
        return io.StringIO()
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "w", encoding="utf-8")
