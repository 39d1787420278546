"""Batch manifests: the commit point of the archive, and recovery from them at start-up.

A batch of one partition is archived exactly when its manifest `_manifests/<cluster>/<topic>-<p>-<first>-<last>.json`
exists (or a checkpoint has folded it, `records.py`). The manifest is written atomically (locally temp + fsync +
rename + fsync dir; on S3 one PUT) only after every file it lists is durable, so:

* a file neither the current checkpoint nor a manifest after it lists (live, or retired and within its grace
  period) is the leftover of a batch or a maintenance run that crashed before its commit point: recovery deletes
  it;
* the next offset to read in a partition is the last committed offset + 1, under the current Kafka cluster id;
  batches recorded under another cluster id refer to a log that is gone (their files stay archived), and that
  partition of the new log is read from its beginning.

Recovery reads the current checkpoint and the manifests after it (`state.load_state`): a bounded number, whatever
the archive's age.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines.archive import layout
from pipelines.archive.durable import fsync_dir
from pipelines.archive.records import ArchiveError, CommittedFile, Manifest, write_manifest  # noqa: F401
from pipelines.archive.state import ArchiveState, load_state
from pipelines.archive.writer import EVENTS, FileEntry
from schemas import storage


def load_manifests(root: Path | str, cluster_id: str | None = None) -> list[Manifest]:
    """The committed manifests the current checkpoint has not folded (of one cluster id, or all), oldest commit
    first. A manifest that cannot be read raises ArchiveError: without it, its files would look like orphans."""
    manifests = load_state(root).manifests
    return [m for m in manifests if cluster_id is None or m.cluster_id == cluster_id]


def committed_files(root: Path | str, kind: str | None = None) -> list[CommittedFile]:
    """Every live file (of one kind, or all) with its batch's cluster id and commit time, oldest commit first."""
    return [f for f in load_state(root).files if kind is None or f.entry.kind == kind]


def manifested_files(root: Path | str, kind: str = EVENTS) -> list[FileEntry]:
    """Files of committed batches (what readers may read), oldest commit first."""
    return [f.entry for f in committed_files(root, kind)]


@dataclass
class Recovery:
    positions: dict[tuple[str, int], int]     # next offset to read, per partition, under the current cluster id
    manifests: int                            # manifests read under the current cluster id (after the checkpoint)
    manifests_other_clusters: int             # manifests read under other cluster ids (after the checkpoint)
    orphans_deleted: list[str]                # root-relative paths of files no commit record listed
    missing_files: list[str]                  # listed as live but absent (damage; reported, not fatal)
    recent_ids: list[tuple[str, str]]         # newest archived (org_id, event_id), oldest first (dedupe seed)
    checkpoint: int | None = None             # the seq of the checkpoint read (None: none yet)
    checkpoint_files: int = 0                 # the live files it lists
    folded_deleted: int = 0                   # manifests it folded that a crash had left behind, deleted

    @property
    def manifests_read(self) -> int:
        return self.manifests + self.manifests_other_clusters


def _sweep_orphans(root: Path | str, known: set[str], present: list[storage.StoredFile]) -> list[str]:
    """Delete the temp files of interrupted writes and the data/dead-letter files no commit record lists."""
    deleted = []
    touched: set = set()
    for f in present:
        in_data = layout.is_data_or_dead_letter_file(f.rel)
        temp_record = (f.rel.startswith((layout.MANIFEST_DIR + "/", layout.CHECKPOINT_DIR + "/"))
                       and storage.is_temp(f.loc))
        orphan = in_data and (storage.is_temp(f.loc) or (f.rel.endswith(".parquet") and f.rel not in known))
        if orphan or temp_record:
            storage.delete(f.loc)
            deleted.append(f.rel)
            if in_data:
                touched.add(storage.parent(f.loc))
    for d in sorted(touched, key=str):
        if (local := storage.local_path(d)) is not None and local.is_dir():
            fsync_dir(local)
    return deleted


def _recent_ids(root: Path | str, files: list[CommittedFile], limit: int,
                present: set[str]) -> list[tuple[str, str]]:
    chunks: list[list[tuple[str, str]]] = []
    n = 0
    for f in reversed(files):
        if n >= limit:
            break
        if f.entry.kind == EVENTS and f.entry.path in present:
            t = storage.read_parquet(storage.join(root, f.entry.path), ["org_id", "event_id"])
            ids = list(zip(t.column("org_id").to_pylist(), t.column("event_id").to_pylist()))
            chunks.append(ids)
            n += len(ids)
    ids = [e for chunk in reversed(chunks) for e in chunk]
    return ids[-limit:] if limit else []


def recover(root: Path | str, cluster_id: str, window: int = 0) -> Recovery:
    """Make the archive consistent after any crash and say where to resume. Idempotent."""
    root = storage.normalize(root)
    storage.mkdirs(root)
    state = load_state(root)
    for m in state.folded:
        storage.delete(m.loc)
    files = state.files
    live = {f.entry.path for f in files}
    present = storage.list_files(root)  # one listing serves the sweep, the missing files and the dedupe seed
    orphans = _sweep_orphans(root, live | state.retired_paths(), present)
    existing = {f.rel for f in present} - set(orphans)
    missing = sorted(p for p in live if p not in existing)
    positions = {(name.rsplit("/", 1)[0], int(name.rsplit("/", 1)[1])): off
                 for name, off in state.positions().get(cluster_id, {}).items()}
    current = sum(1 for m in state.manifests if m.cluster_id == cluster_id)
    cp = state.checkpoint
    return Recovery(positions, current, len(state.manifests) - current, orphans, missing,
                    _recent_ids(root, files, window, existing), cp.seq if cp else None,
                    len(cp.files) if cp else 0, len(state.folded))


def recovery_reads(where) -> dict:
    """What a restarted archiver would read to recover, without changing anything: the checkpoint's seq and file
    count, and the number of manifests after it. `where` is an archive root (folder or URL) or an `RtrlConfig`."""
    if hasattr(where, "archive"):
        root = layout.archive_root(where)
    elif hasattr(where, "output_dir"):  # an ArchiveConfig knows its root only when output_dir is set
        if not where.output_dir:
            raise ValueError("archive.output_dir is '' (<state_dir>/archive): pass the RtrlConfig or the root")
        root = storage.normalize(where.output_dir)
    else:
        root = storage.normalize(where)
    state = load_state(root)
    cp = state.checkpoint
    return {"root": str(root), "checkpoint": cp.seq if cp else None, "checkpoint_files": len(cp.files) if cp else 0,
            "manifests": len(state.manifests), "folded_left": len(state.folded)}


__all__ = ["ArchiveError", "ArchiveState", "CommittedFile", "Manifest", "Recovery", "committed_files",
           "load_manifests", "manifested_files", "recover", "recovery_reads", "write_manifest"]
