"""The archive's two commit records, as stored: a batch's manifest and a checkpoint.

* A manifest `_manifests/<cluster>/<topic>-<p>-<first>-<last>.json` commits one partition batch: its Kafka offsets
  and the files it wrote.
* A checkpoint `_checkpoints/checkpoint-<seq>.json` folds every manifest written before it into one record:
  - `positions`: per Kafka cluster id, per partition, the next offset after the manifests it folded. A manifest
    of that cluster is folded exactly when its `last` offset is below that position, which its name says: folded
    manifests are recognised without being read;
  - `files`: every live file (data, dead letters, duplicates), each with the cluster id and commit time of the
    batch (or the compaction) that wrote it;
  - `retired`: files no longer part of the archive (replaced by a compacted file, or expired by retention), with
    when they were retired: they stay readable for a grace period (`archive.retire_grace_s`), so a reader that
    listed the archive before still finds every file it listed; maintenance deletes them after it.
  The newest checkpoint (highest seq) is the current one.

Both are written atomically (locally temp + fsync + rename + fsync dir; on S3 one PUT).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pipelines.archive import layout
from pipelines.archive.durable import write_bytes_durably
from pipelines.archive.writer import FileEntry
from schemas import storage

MANIFEST_VERSION = 1
CHECKPOINT_VERSION = 1
KEEP_CHECKPOINTS = 2   # the current one and its predecessor (a reader may have just listed it)

_MANIFEST_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)-(?P<first>\d+)-(?P<last>\d+)\.json$")
_CHECKPOINT_NAME = re.compile(r"^checkpoint-(?P<seq>\d+)\.json$")


class ArchiveError(RuntimeError):
    """The archive cannot be used safely as it is (a corrupt manifest, another archiver holding the root)."""


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


# -- manifests ----------------------------------------------------------------------------------------------------


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
    committed_at: str = field(default_factory=utc_now)
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


@dataclass(frozen=True)
class StoredManifest:
    """A manifest found by listing, known by its name: cluster folder, topic (as safe), partition, offsets."""

    loc: Path | str
    cluster_dir: str
    topic: str
    partition: int
    first: int
    last: int


def list_manifests(root: Path | str) -> list[StoredManifest]:
    """Every manifest under the root, from one listing (a few requests on an object store); none is read."""
    out = []
    for f in storage.list_files(storage.join(root, layout.MANIFEST_DIR)):
        parts = f.rel.split("/")
        m = _MANIFEST_NAME.match(parts[-1]) if len(parts) == 2 and not storage.is_temp(f.loc) else None
        if m:
            out.append(StoredManifest(f.loc, parts[0], m["topic"], int(m["partition"]), int(m["first"]),
                                      int(m["last"])))
    return out


def read_manifest(loc: Path | str) -> Manifest:
    """One manifest. FileNotFoundError when it is gone; ArchiveError when it cannot be read (without it, its files
    would look like orphans)."""
    data = storage.read_bytes(loc)
    try:
        return Manifest.from_json(data)
    except (ValueError, TypeError, KeyError) as e:
        raise ArchiveError(f"cannot read manifest {loc}: {type(e).__name__}: {e}; move it aside only if you know "
                           "its batch is lost (its files would then be deleted as orphans)") from e


# -- checkpoints --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommittedFile:
    """A live file of the archive: what its manifest listed, with the batch's cluster id and commit time."""

    entry: FileEntry
    cluster_id: str
    committed_at: str

    def to_dict(self) -> dict:
        return {**self.entry.to_dict(), "cluster_id": self.cluster_id, "committed_at": self.committed_at}

    @classmethod
    def from_dict(cls, d: dict) -> "CommittedFile":
        d = dict(d)
        cluster_id, committed_at = d.pop("cluster_id"), d.pop("committed_at")
        return cls(FileEntry.from_dict(d), cluster_id, committed_at)


@dataclass(frozen=True)
class Retired:
    """A file that is no longer part of the archive, kept until `since` + the grace period."""

    path: str
    since: str
    reason: str            # "compacted" | "expired"


@dataclass
class Checkpoint:
    seq: int
    positions: dict[str, dict[str, int]]     # cluster id -> 'topic/partition' -> next offset (folded manifests)
    files: list[CommittedFile]
    retired: list[Retired]
    manifests_folded: int = 0                # how many manifests this checkpoint folded (it, not its predecessors)
    written_at: str = field(default_factory=utc_now)
    version: int = CHECKPOINT_VERSION

    def watermarks(self) -> dict[tuple[str, str, int], int]:
        """(cluster folder, topic as in names, partition) -> next offset: what `folds` compares names with."""
        out = {}
        for cluster, tps in self.positions.items():
            for name, offset in tps.items():
                topic, partition = name.rsplit("/", 1)
                out[(layout.safe(cluster), layout.safe(topic), int(partition))] = offset
        return out

    def to_json(self) -> bytes:
        d = {"version": self.version, "seq": self.seq, "written_at": self.written_at,
             "manifests_folded": self.manifests_folded, "positions": self.positions,
             "files": [f.to_dict() for f in self.files], "retired": [r.__dict__ for r in self.retired]}
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> "Checkpoint":
        d = json.loads(data)
        return cls(seq=int(d["seq"]), positions=d["positions"],
                   files=[CommittedFile.from_dict(f) for f in d["files"]],
                   retired=[Retired(**r) for r in d["retired"]], manifests_folded=int(d.get("manifests_folded", 0)),
                   written_at=d["written_at"], version=int(d["version"]))


def folds(watermarks: dict[tuple[str, str, int], int], m: StoredManifest) -> bool:
    """Whether a checkpoint with these watermarks folded the manifest `m` (it did when `m` ends below them)."""
    return m.last < watermarks.get((m.cluster_dir, m.topic, m.partition), 0)


def checkpoint_seqs(root: Path | str) -> list[int]:
    """The seqs of the stored checkpoints, ascending (temp files of interrupted writes skipped)."""
    seqs = []
    for f in storage.list_files(storage.join(root, layout.CHECKPOINT_DIR), recursive=False):
        m = None if storage.is_temp(f.loc) else _CHECKPOINT_NAME.match(f.rel)
        if m:
            seqs.append(int(m["seq"]))
    return sorted(seqs)


def read_latest_checkpoint(root: Path | str) -> Checkpoint | None:
    """The current checkpoint, None before the first. One pruned between its listing and its read means a newer
    one exists: listed again. A corrupt current checkpoint raises ArchiveError (its predecessor is not a substitute:
    the manifests it folded are gone)."""
    for _ in range(5):
        seqs = checkpoint_seqs(root)
        if not seqs:
            return None
        loc = layout.checkpoint_file(root, seqs[-1])
        try:
            data = storage.read_bytes(loc)
        except FileNotFoundError:
            continue
        try:
            return Checkpoint.from_json(data)
        except (ValueError, TypeError, KeyError) as e:
            raise ArchiveError(f"cannot read checkpoint {loc}: {type(e).__name__}: {e}") from e
    raise ArchiveError(f"the checkpoints under {root} kept changing while being read")


def write_checkpoint(root: Path | str, checkpoint: Checkpoint) -> Path | str:
    """Commit a checkpoint: after this returns it is the current one."""
    loc = layout.checkpoint_file(root, checkpoint.seq)
    write_bytes_durably(loc, checkpoint.to_json())
    return loc


def prune_checkpoints(root: Path | str, keep: int = KEEP_CHECKPOINTS) -> int:
    """Delete all but the newest `keep` checkpoints; returns how many were deleted."""
    old = checkpoint_seqs(root)[:-keep] if keep else checkpoint_seqs(root)
    for seq in old:
        storage.delete(layout.checkpoint_file(root, seq))
    return len(old)
