"""Where things live under the archive root.

    <root>/event_type=<t>/event_date=<YYYY-MM-DD>/part-<topic>-<partition>-<first>-<last>-<cluster>.parquet
    <root>/_dead_letter/part-<topic>-<partition>-<first>-<last>-<cluster>.parquet
    <root>/_manifests/<cluster>/<topic>-<partition>-<first>-<last>.json      (the commit point of one batch)
    <root>/_checkpoints/checkpoint-<seq>.json     (every manifest up to it folded in: the commit point of maintenance)
    <root>/event_type=<t>/event_date=<YYYY-MM-DD>/part-compacted-<seq>-<i>-<cluster>.parquet   (a compacted file)
    <root>/_archiver.lock                                                    (one archiver per root)

`first`/`last` are the Kafka offsets the batch covers (inclusive). `<cluster>` is the Kafka cluster id the offsets
refer to: when the broker's log is replaced (a new cluster id) offsets restart at 0, and the id in the names keeps
the new log's batches from overwriting the old log's files. Paths inside manifests are relative to the root.

The root is a storage location (`schemas.storage`): a local folder, or an object-store URL such as
`s3://bucket/archive`. Locations keep their kind: a `Path` for a local root, a URL string for an object store.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from schemas import storage

MANIFEST_DIR = "_manifests"
CHECKPOINT_DIR = "_checkpoints"
DEAD_LETTER_DIR = "_dead_letter"
DUPLICATE_DIR = "_duplicates"   # the copies dropped as duplicates: identity, times, provenance (for replays)
LOCK_FILE = "_archiver.lock"
IMPORTS_DIR = "_imports"      # `rtrl archive import`'s records and dead letters (retention: archive.retention_s)

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe(name: str) -> str:
    """A name usable as one path component (cluster ids and topics are nearly always safe already)."""
    out = _UNSAFE.sub("_", name)
    return out if out not in ("", ".", "..") else f"_{out}"


def archive_root(cfg) -> Path | str:
    """The archive root of an `RtrlConfig`: `archive.output_dir` (a local path, or an object-store URL kept as
    such), or <state_dir>/archive."""
    out = cfg.archive.output_dir
    if out and storage.is_remote(out):
        return storage.normalize(out)
    return cfg.path_or_default(out, "archive")


def batch_key(topic: str, partition: int, first: int, last: int) -> str:
    return f"{safe(topic)}-{partition}-{first}-{last}"


def data_file(event_type: str, event_date: date, topic: str, partition: int, first: int, last: int,
              cluster_id: str) -> str:
    return (f"event_type={event_type}/event_date={event_date.isoformat()}/"
            f"part-{batch_key(topic, partition, first, last)}-{safe(cluster_id)}.parquet")


def dead_letter_file(topic: str, partition: int, first: int, last: int, cluster_id: str) -> str:
    return f"{DEAD_LETTER_DIR}/part-{batch_key(topic, partition, first, last)}-{safe(cluster_id)}.parquet"


def duplicate_file(topic: str, partition: int, first: int, last: int, cluster_id: str) -> str:
    return f"{DUPLICATE_DIR}/part-{batch_key(topic, partition, first, last)}-{safe(cluster_id)}.parquet"


def compacted_file(kind_dir: str, seq: int, index: int, cluster_id: str) -> str:
    """A compacted file written by the maintenance that commits checkpoint `seq`; `kind_dir` is the folder of the
    files it replaces (`event_type=<t>/event_date=<d>`, or the dead-letter or duplicate folder)."""
    return f"{kind_dir}/part-compacted-{seq}-{index}-{safe(cluster_id)}.parquet"


def partition_dir(event_type: str, event_date: str) -> str:
    return f"event_type={event_type}/event_date={event_date}"


def checkpoint_file(root: Path | str, seq: int) -> Path | str:
    return storage.join(root, CHECKPOINT_DIR, f"checkpoint-{seq:012d}.json")


def manifest_dir(root: Path | str, cluster_id: str) -> Path | str:
    return storage.join(root, MANIFEST_DIR, safe(cluster_id))


def manifest_file(root: Path | str, cluster_id: str, topic: str, partition: int, first: int,
                  last: int) -> Path | str:
    return storage.join(manifest_dir(root, cluster_id), f"{batch_key(topic, partition, first, last)}.json")


def is_data_or_dead_letter_file(rel: str) -> bool:
    """Whether a root-relative path is where a data or dead-letter file (or its temp file) lives."""
    parts = rel.split("/")
    return ((len(parts) == 3 and parts[0].startswith("event_type=") and parts[1].startswith("event_date="))
            or (len(parts) == 2 and parts[0] in (DEAD_LETTER_DIR, DUPLICATE_DIR)))


def data_dirs(root: Path | str) -> list[Path | str]:
    """Every directory that holds data or dead-letter files (the ones recovery sweeps for orphans)."""
    dirs = [storage.join(root, t, d) for t in storage.list_dirs(root) if t.startswith("event_type=")
            for d in storage.list_dirs(storage.join(root, t)) if d.startswith("event_date=")]
    extra = [storage.join(root, d) for d in (DEAD_LETTER_DIR, DUPLICATE_DIR)]
    return dirs + [d for d in extra if storage.is_dir(d)]
