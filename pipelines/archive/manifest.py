"""Batch manifests: the commit point of the archive, and recovery from them at start-up.

A batch of one partition is archived exactly when its manifest `_manifests/<cluster>/<topic>-<p>-<first>-<last>.json`
exists. The manifest is written atomically (locally temp + fsync + rename + fsync dir; on S3 one PUT) only after
every file it lists is durable, so:

* a file no manifest lists is the leftover of a batch that crashed before its commit point: recovery deletes it;
* the next offset to read in a partition is the last manifested offset + 1, under the current Kafka cluster id;
  manifests recorded under another cluster id refer to a log that is gone (their files stay archived), and that
  partition of the new log is read from its beginning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pipelines.archive import layout
from pipelines.archive.durable import fsync_dir, write_bytes_durably
from pipelines.archive.writer import EVENTS, FileEntry
from schemas import storage

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

    def path(self, root: Path | str) -> Path | str:
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


def write_manifest(root: Path | str, manifest: Manifest) -> Path | str:
    """Commit a batch: after this returns, its files are part of the archive."""
    path = manifest.path(root)
    write_bytes_durably(path, manifest.to_json())
    return path


def load_manifests(root: Path | str, cluster_id: str | None = None) -> list[Manifest]:
    """Every committed manifest (of one cluster id, or all), oldest commit first. A manifest that cannot be read
    raises ArchiveError: without it, its files would look like orphans."""
    root = storage.normalize(root)
    base = storage.join(root, layout.MANIFEST_DIR)
    # One listing (a few requests on an object store, not one per folder): <cluster>/<batch>.json under base.
    prefix = layout.safe(cluster_id) + "/" if cluster_id is not None else ""
    found = [f for f in storage.list_files(storage.join(base, prefix) if prefix else base)]
    out = []
    for f in found:
        rel = prefix + f.rel
        if rel.count("/") != 1 or storage.is_temp(f.loc) or not rel.endswith(".json"):
            continue
        try:
            out.append(Manifest.from_json(storage.read_bytes(f.loc)))
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise ArchiveError(f"cannot read manifest {f.loc}: {type(e).__name__}: {e}; move it aside only if "
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


def _sweep_orphans(root: Path | str, listed: set[str], present: list[storage.StoredFile]) -> list[str]:
    """Delete the temp files of interrupted writes and the data/dead-letter files no manifest lists."""
    deleted = []
    touched: set = set()
    for f in present:
        in_data = layout.is_data_or_dead_letter_file(f.rel)
        temp_manifest = f.rel.startswith(layout.MANIFEST_DIR + "/") and f.rel.count("/") == 2 and storage.is_temp(
            f.loc)
        orphan = in_data and (storage.is_temp(f.loc) or (f.rel.endswith(".parquet") and f.rel not in listed))
        if orphan or temp_manifest:
            storage.delete(f.loc)
            deleted.append(f.rel)
            if in_data:
                touched.add(storage.parent(f.loc))
    for d in sorted(touched, key=str):
        if (local := storage.local_path(d)) is not None and local.is_dir():
            fsync_dir(local)
    return deleted


def _recent_ids(root: Path | str, manifests: list[Manifest], limit: int, present: set[str]) -> list[str]:
    chunks: list[list[str]] = []
    n = 0
    for m in reversed(manifests):
        for f in m.files:
            if n >= limit:
                break
            if f.kind == EVENTS and f.path in present:
                ids = storage.read_parquet(storage.join(root, f.path), ["event_id"]).column("event_id").to_pylist()
                chunks.append(ids)
                n += len(ids)
        if n >= limit:
            break
    ids = [e for chunk in reversed(chunks) for e in chunk]
    return ids[-limit:] if limit else []


def recover(root: Path | str, cluster_id: str, window: int = 0) -> Recovery:
    """Make the archive consistent after any crash and say where to resume. Idempotent."""
    root = storage.normalize(root)
    storage.mkdirs(root)
    manifests = load_manifests(root)
    listed = {f.path for m in manifests for f in m.files}
    present = storage.list_files(root)  # one listing serves the sweep, the missing files and the dedupe seed
    orphans = _sweep_orphans(root, listed, present)
    existing = {f.rel for f in present} - set(orphans)
    missing = sorted(p for p in listed if p not in existing)
    current = [m for m in manifests if m.cluster_id == cluster_id]
    positions: dict[tuple[str, int], int] = {}
    for m in current:
        positions[m.tp] = max(positions.get(m.tp, 0), m.last_offset + 1)
    return Recovery(positions, len(current), len(manifests) - len(current), orphans, missing,
                    _recent_ids(root, manifests, window, existing))


def manifested_files(root: Path | str, kind: str = EVENTS) -> list[FileEntry]:
    """Files of committed batches (what readers may read), oldest commit first."""
    return [f for m in load_manifests(root) for f in m.files if f.kind == kind]
