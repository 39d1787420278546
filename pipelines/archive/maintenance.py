"""Maintenance of an archive root: checkpoint, compaction, age retention, deletion of retired files.

Run by the archiver every `archive.compact_every_s`, or sooner once `archive.checkpoint_every_manifests` manifests
were written since the last checkpoint (`maintenance_due`), and by `rtrl archive compact`. Only the holder of the
root's lock runs it (the archiver, or the command while no archiver runs), so nothing else writes meanwhile.

    1. read the state: the current checkpoint + the manifests after it
    2. plan: expired files (`retention`), groups of small files (`compaction`), retired files past their grace
    3. write each group's compacted file (durable; not yet part of the archive)
    4. write checkpoint seq+1: every manifest read is folded; compacted files listed in place of their inputs;
       inputs and expired files listed as retired (from now); retired files past their grace dropped.
       THE COMMIT POINT
    5. delete: retired files past their grace, the manifests folded, all but the last two checkpoints
    6. delete the import records (`_imports/`) written `retention_s` or more ago (`retention.expired_imports`;
       nothing reads them, so at once and whether or not there was anything else to do)

Crash-safe at each point: before 4 the compacted files are listed nowhere (recovery deletes them as orphans) and
the old checkpoint + manifests still describe the archive; after 4 the new checkpoint does, the manifests it folded
are skipped by readers (and deleted by recovery), and files it no longer lists are orphans. A reader sees each
event exactly once whichever checkpoint it reads: a file's rows are live in one place at a time, and a file leaves
the archive (retired) `retire_grace_s` before it leaves the storage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from pipelines.archive import compaction, retention
from pipelines.archive.config import ArchiveConfig
from pipelines.archive.layout import IMPORTS_DIR
from pipelines.archive.records import ArchiveError, Checkpoint, Retired, prune_checkpoints, write_checkpoint
from pipelines.archive.state import load_state
from schemas import storage

# Fault injection for tests: called with the name of each step just completed.
FAULT_POINTS = ("compacted_written", "checkpoint_written", "retired_deleted", "manifests_deleted")


def _no_fault(point: str) -> None:
    pass


def maintenance_due(now_s: float, last_s: float, manifests_since: int, cfg: ArchiveConfig) -> bool:
    """Whether the archiver runs maintenance now (monotonic seconds): `compact_every_s` after the last run, or once
    `checkpoint_every_manifests` manifests were committed since it."""
    return manifests_since >= cfg.checkpoint_every_manifests or now_s - last_s >= cfg.compact_every_s


def retire_due(r: Retired, now: datetime, grace_s: float) -> bool:
    return datetime.fromisoformat(r.since) + timedelta(seconds=grace_s) <= now


@dataclass
class MaintenanceResult:
    checkpoint: int | None = None     # the seq written; None when there was nothing to do
    manifests_folded: int = 0
    files_compacted: int = 0          # small files replaced by compacted ones
    files_written: int = 0            # compacted files written
    groups_skipped: int = 0           # groups left as they were (an input unreadable: see the log)
    partitions_expired: int = 0       # (event type, event date) partitions retired by age
    files_expired: int = 0
    retired_deleted: int = 0          # retired files deleted after their grace period
    live_files: int = 0
    live_bytes: int = 0
    retired_pending: int = 0          # retired files still within their grace period
    imports_expired: int = 0          # import records (`_imports/`) deleted by age

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        if self.checkpoint is None:
            return (f"archive: maintenance: nothing to do ({self.live_files} live files)"
                    + (f"; {self.imports_expired} import records expired" if self.imports_expired else ""))
        return (f"archive: checkpoint {self.checkpoint}: {self.manifests_folded} manifests folded; "
                f"{self.files_compacted} files compacted into {self.files_written}; {self.partitions_expired} "
                f"partitions ({self.files_expired} files) expired; {self.retired_deleted} retired files deleted; "
                f"{self.live_files} live files ({self.live_bytes / 2**20:,.1f} MiB), {self.retired_pending} retired "
                "within their grace period" + (f"; {self.imports_expired} import records expired"
                                               if self.imports_expired else ""))


def maintain(root: Path | str, cfg: ArchiveConfig, now: datetime, *, renew: Callable[[], None] = lambda: None,
             log: Callable[[str], None] = lambda _: None,
             fault: Callable[[str], None] = _no_fault) -> MaintenanceResult:
    """One maintenance run at wall-clock `now` (see the module docstring). `renew` is called just before the commit
    point (an object-store root's lease: a lost lease raises there, before anything is committed)."""
    root = storage.normalize(root)
    state = load_state(root)
    cp = state.checkpoint
    files = state.files
    expired = retention.expired(files, now, cfg.retention_s)
    gone = {f.entry.path for f in expired}
    remaining = [f for f in files if f.entry.path not in gone]
    groups = compaction.plan_compaction(remaining, cfg.compact_target_bytes, cfg.compact_min_files)
    retired = list(cp.retired) if cp else []
    due = [r for r in retired if retire_due(r, now, cfg.retire_grace_s)]
    result = MaintenanceResult(live_files=len(files), live_bytes=sum(f.entry.bytes for f in files),
                               retired_pending=len(retired))
    result.imports_expired = expire_import_records(root, now, cfg.retention_s)
    if not (state.manifests or expired or groups or due):
        return result

    seq = (cp.seq if cp else 0) + 1
    since = now.isoformat(timespec="microseconds")
    written, replaced = [], []
    for i, group in enumerate(groups):
        try:
            out = compaction.write_compacted(root, group, seq, i, cfg.compression,
                                             max(f.committed_at for f in group))
        except (FileNotFoundError, ValueError, KeyError, TypeError, ArchiveError) as e:  # a damaged input
            result.groups_skipped += 1
            log(f"archive: compaction of {compaction.group_key(group[0])} skipped: {type(e).__name__}: {e}")
            continue
        written.append(out)
        replaced += group
    fault("compacted_written")

    replaced_paths = {f.entry.path for f in replaced}
    live = [f for f in remaining if f.entry.path not in replaced_paths] + written
    live.sort(key=lambda f: (f.committed_at, f.entry.path))
    kept = [r for r in retired if r not in due]
    kept += [Retired(f.entry.path, since, "compacted") for f in replaced]
    kept += [Retired(f.entry.path, since, "expired") for f in expired]
    new = Checkpoint(seq, state.positions(), live, kept, manifests_folded=len(state.manifests), written_at=since)
    renew()
    write_checkpoint(root, new)
    fault("checkpoint_written")

    for r in due:
        storage.delete(storage.join(root, r.path))
    _remove_empty_dirs(root, [r.path for r in due])
    fault("retired_deleted")
    for m in state.folded:
        storage.delete(m.loc)
    for m in state.manifests:
        storage.delete(m.path(root))
    prune_checkpoints(root)
    fault("manifests_deleted")

    result.checkpoint = seq
    result.manifests_folded = len(state.manifests)
    result.files_compacted = len(replaced)
    result.files_written = len(written)
    result.partitions_expired = len(retention.expired_partitions(expired))
    result.files_expired = len(expired)
    result.retired_deleted = len(due)
    result.live_files = len(live)
    result.live_bytes = sum(f.entry.bytes for f in live)
    result.retired_pending = len(kept)
    return result


def expire_import_records(root: Path | str, now: datetime, retention_s: float) -> int:
    """Delete the import records (`_imports/*`) `retention.expired_imports` names at `now`; how many."""
    if retention_s <= 0:
        return 0
    folder = storage.join(root, IMPORTS_DIR)
    found = {f.rel: f for f in storage.list_files(folder, recursive=False)}
    gone = retention.expired_imports([(rel, f.mtime_ns / 1e9 if f.mtime_ns is not None else None)
                                      for rel, f in found.items()], now, retention_s)
    for rel in gone:
        storage.delete(found[rel].loc)
    return len(gone)


def _remove_empty_dirs(root: Path | str, rels: list[str]) -> None:
    """Remove the local partition folders the deleted files leave empty (an object store has no folders)."""
    local = storage.local_path(root)
    if local is None:
        return
    for d in sorted({(local / rel).parent for rel in rels}, key=lambda p: -len(p.parts)):
        for folder in (d, d.parent):
            if folder != local and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
