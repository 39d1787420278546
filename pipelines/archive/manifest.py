"""Batch manifests: the commit point of the archive, and recovery from them at start-up.

A batch of one partition is archived exactly when its manifest `_manifests/<cluster>/<topic>-<p>-<first>-<last>.json`
exists. The manifest is written (temp + fsync + rename + fsync dir) only after every file it lists is durable, so:

* a file no manifest lists is the leftover of a batch that crashed before its commit point: recovery deletes it;
* the next offset to read in a partition is the last manifested offset + 1, under the current Kafka cluster id;
  manifests recorded under another cluster id refer to a log that is gone (their files stay archived), and that
  partition of the new log is read from its beginning.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.archive import layout
from pipelines.archive.durable import fsync_dir, is_temp, write_bytes_durably
from pipelines.archive.writer import EVENTS, FileEntry

MANIFEST_VERSION = 1


class ArchiveError(RuntimeError):
    """The archive cannot be used safely as it is (a corrupt manifest, another archiver holding the root)."""


@dataclass
class Manifest:
    cluster_id: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    messages: int
    events: int
    duplicates: int
    dead_letters: dict[str, int]
    files: list[FileEntry]
    committed_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="microseconds"))
    version: int = MANIFEST_VERSION

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    def path(self, root: Path) -> Path:
        return layout.manifest_file(root, self.cluster_id, self.topic, self.partition, self.first_offset,
                                    self.last_offset)

    def to_json(self) -> bytes:
        d = {**self.__dict__, "files": [f.to_dict() for f in self.files]}
        return json.dumps(d, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> "Manifest":
        d = json.loads(data)
        d["files"] = [FileEntry.from_dict(f) for f in d["files"]]
        return cls(**d)


def write_manifest(root: Path, manifest: Manifest) -> Path:
    """Commit a batch: after this returns, its files are part of the archive."""
    path = manifest.path(root)
    write_bytes_durably(path, manifest.to_json())
    return path


def load_manifests(root: Path, cluster_id: str | None = None) -> list[Manifest]:
    """Every committed manifest (of one cluster id, or all), oldest commit first. A manifest that cannot be read
    raises ArchiveError: without it, its files would look like orphans."""
    base = root / layout.MANIFEST_DIR
    dirs = [layout.manifest_dir(root, cluster_id)] if cluster_id is not None else (
        sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else [])
    out = []
    for d in dirs:
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if is_temp(p) or p.suffix != ".json":
                continue
            try:
                out.append(Manifest.from_json(p.read_bytes()))
            except (OSError, ValueError, TypeError, KeyError) as e:
                raise ArchiveError(f"cannot read manifest {p}: {type(e).__name__}: {e}; move it aside only if "
                                   "you know its batch is lost (its files would then be deleted as orphans)") from e
    out.sort(key=lambda m: (m.committed_at, m.cluster_id, m.topic, m.partition, m.first_offset))
    return out


@dataclass
class Recovery:
    positions: dict[tuple[str, int], int]     # next offset to read, per partition, under the current cluster id
    manifests: int                            # manifests under the current cluster id
    manifests_other_clusters: int
    orphans_deleted: list[str]                # root-relative paths of files no manifest listed
    missing_files: list[str]                  # listed by a manifest but absent (damage; reported, not fatal)
    recent_ids: list[str]                     # newest archived event_ids, oldest first (dedupe window seed)


def _sweep_orphans(root: Path, listed: set[str]) -> list[str]:
    deleted = []
    for d in layout.data_dirs(root):
        removed_here = False
        for p in sorted(d.iterdir()):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and (is_temp(p) or (p.suffix == ".parquet" and rel not in listed)):
                p.unlink()
                deleted.append(rel)
                removed_here = True
        if removed_here:
            fsync_dir(d)
    base = root / layout.MANIFEST_DIR
    if base.is_dir():
        for d in base.iterdir():
            for p in (d.iterdir() if d.is_dir() else ()):
                if is_temp(p):
                    p.unlink()
                    deleted.append(p.relative_to(root).as_posix())
    return deleted


def _recent_ids(root: Path, manifests: list[Manifest], limit: int) -> list[str]:
    chunks: list[list[str]] = []
    n = 0
    for m in reversed(manifests):
        for f in m.files:
            if n >= limit:
                break
            if f.kind == EVENTS and os.path.exists(root / f.path):
                ids = pq.read_table(root / f.path, columns=["event_id"]).column("event_id").to_pylist()
                chunks.append(ids)
                n += len(ids)
        if n >= limit:
            break
    ids = [e for chunk in reversed(chunks) for e in chunk]
    return ids[-limit:] if limit else []


def recover(root: Path, cluster_id: str, window: int = 0) -> Recovery:
    """Make the archive consistent after any crash and say where to resume. Idempotent."""
    root.mkdir(parents=True, exist_ok=True)
    manifests = load_manifests(root)
    listed = {f.path for m in manifests for f in m.files}
    orphans = _sweep_orphans(root, listed)
    missing = sorted(p for p in listed if not (root / p).exists())
    current = [m for m in manifests if m.cluster_id == cluster_id]
    positions: dict[tuple[str, int], int] = {}
    for m in current:
        positions[m.tp] = max(positions.get(m.tp, 0), m.last_offset + 1)
    return Recovery(positions, len(current), len(manifests) - len(current), orphans, missing,
                    _recent_ids(root, manifests, window))


def manifested_files(root: Path, kind: str = EVENTS) -> list[FileEntry]:
    """Files of committed batches (what readers may read), oldest commit first."""
    return [f for m in load_manifests(root) for f in m.files if f.kind == kind]
