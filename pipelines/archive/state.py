"""What the archive holds now: the current checkpoint plus the manifests committed after it.

`load_state` reads one checkpoint and only the manifests it has not folded (bounded by how often checkpoints are
written), never the whole history. It is safe beside a running archiver's maintenance, which writes a new
checkpoint and then deletes the manifests it folded: the manifests are listed *before* the checkpoint is read, so
a manifest listed and then folded is covered by the checkpoint read after it; one that vanishes between listing
and reading was folded by a newer checkpoint, which is then read instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines.archive import layout
from pipelines.archive.messages import tp_name
from pipelines.archive.records import (ArchiveError, Checkpoint, CommittedFile, Manifest, StoredManifest, folds,
                                       list_manifests, read_latest_checkpoint, read_manifest)
from schemas import storage


@dataclass
class ArchiveState:
    checkpoint: Checkpoint | None
    manifests: list[Manifest]          # committed after the checkpoint, oldest commit first
    folded: list[StoredManifest]       # manifests the checkpoint folded that are still stored (a crash's leftovers)

    @property
    def files(self) -> list[CommittedFile]:
        """Every live file, oldest commit first: the checkpoint's, then the manifests'."""
        out = list(self.checkpoint.files) if self.checkpoint else []
        out += [CommittedFile(f, m.cluster_id, m.committed_at) for m in self.manifests for f in m.files]
        out.sort(key=lambda f: f.committed_at)
        return out

    def positions(self) -> dict[str, dict[str, int]]:
        """Cluster id -> 'topic/partition' -> next offset after every committed batch."""
        out = {c: dict(tps) for c, tps in (self.checkpoint.positions if self.checkpoint else {}).items()}
        for m in self.manifests:
            tps = out.setdefault(m.cluster_id, {})
            key = tp_name(m.tp)
            tps[key] = max(tps.get(key, 0), m.last_offset + 1)
        return out

    def retired_paths(self) -> set[str]:
        return {r.path for r in self.checkpoint.retired} if self.checkpoint else set()


def load_state(root: Path | str) -> ArchiveState:
    """The archive's committed state (see the module docstring). Raises ArchiveError for an unreadable manifest or
    checkpoint, or a manifest that vanished without a checkpoint folding it."""
    root = storage.normalize(root)
    listed = list_manifests(root)             # first: see the module docstring
    checkpoint = read_latest_checkpoint(root)
    read: dict[str, Manifest] = {}
    for _ in range(5):
        marks = checkpoint.watermarks() if checkpoint else {}
        missing = []
        for m in listed:
            if folds(marks, m) or str(m.loc) in read:
                continue
            try:
                read[str(m.loc)] = read_manifest(m.loc)
            except FileNotFoundError:
                missing.append(m)
        if not missing:
            break
        newer = read_latest_checkpoint(root)
        if newer is None or (checkpoint is not None and newer.seq == checkpoint.seq):
            raise ArchiveError(f"manifest {missing[0].loc} vanished and no checkpoint folded it: the archive is "
                               "damaged (or another process deletes from it)")
        checkpoint = newer
    else:
        raise ArchiveError(f"the archive at {root} kept changing while being read")
    marks = checkpoint.watermarks() if checkpoint else {}
    manifests = [read[str(m.loc)] for m in listed if not folds(marks, m)]
    manifests.sort(key=lambda m: (m.committed_at, m.cluster_id, m.topic, m.partition, m.first_offset))
    return ArchiveState(checkpoint, manifests, [m for m in listed if folds(marks, m)])


def archived_positions(root: Path | str, cluster_id: str | None = None) -> dict[str, int]:
    """'topic/partition' -> next offset after the committed batches of one Kafka cluster id (the highest over all
    when None), from the current checkpoint and the names of the manifests after it: no manifest is read."""
    root = storage.normalize(root)
    listed = list_manifests(root)
    checkpoint = read_latest_checkpoint(root)
    out: dict[str, int] = {}
    for cluster, tps in (checkpoint.positions if checkpoint else {}).items():
        if cluster_id is None or cluster == cluster_id:
            for key, offset in tps.items():
                out[key] = max(out.get(key, 0), offset)
    want = None if cluster_id is None else layout.safe(cluster_id)
    for m in listed:
        if want is None or m.cluster_dir == want:
            key = f"{m.topic}/{m.partition}"
            out[key] = max(out.get(key, 0), m.last + 1)
    return dict(sorted(out.items()))
