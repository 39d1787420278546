"""Where things live under the archive root.

    <root>/event_type=<t>/event_date=<YYYY-MM-DD>/part-<topic>-<partition>-<first>-<last>-<cluster>.parquet
    <root>/_dead_letter/part-<topic>-<partition>-<first>-<last>-<cluster>.parquet
    <root>/_manifests/<cluster>/<topic>-<partition>-<first>-<last>.json      (the commit point of one batch)
    <root>/_archiver.lock                                                    (one archiver per root)

`first`/`last` are the Kafka offsets the batch covers (inclusive). `<cluster>` is the Kafka cluster id the offsets
refer to: when the broker's log is replaced (a new cluster id) offsets restart at 0, and the id in the names keeps
the new log's batches from overwriting the old log's files. Paths inside manifests are relative to the root.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

MANIFEST_DIR = "_manifests"
DEAD_LETTER_DIR = "_dead_letter"
LOCK_FILE = "_archiver.lock"

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe(name: str) -> str:
    """A name usable as one path component (cluster ids and topics are nearly always safe already)."""
    out = _UNSAFE.sub("_", name)
    return out if out not in ("", ".", "..") else f"_{out}"


def archive_root(cfg) -> Path:
    """The archive root of an `RtrlConfig`: `archive.output_dir`, or <state_dir>/archive."""
    return cfg.path_or_default(cfg.archive.output_dir, "archive")


def batch_key(topic: str, partition: int, first: int, last: int) -> str:
    return f"{safe(topic)}-{partition}-{first}-{last}"


def data_file(event_type: str, event_date: date, topic: str, partition: int, first: int, last: int,
              cluster_id: str) -> str:
    return (f"event_type={event_type}/event_date={event_date.isoformat()}/"
            f"part-{batch_key(topic, partition, first, last)}-{safe(cluster_id)}.parquet")


def dead_letter_file(topic: str, partition: int, first: int, last: int, cluster_id: str) -> str:
    return f"{DEAD_LETTER_DIR}/part-{batch_key(topic, partition, first, last)}-{safe(cluster_id)}.parquet"


def manifest_dir(root: Path, cluster_id: str) -> Path:
    return root / MANIFEST_DIR / safe(cluster_id)


def manifest_file(root: Path, cluster_id: str, topic: str, partition: int, first: int, last: int) -> Path:
    return manifest_dir(root, cluster_id) / f"{batch_key(topic, partition, first, last)}.json"


def data_dirs(root: Path) -> list[Path]:
    """Every directory that holds data or dead-letter files (the ones recovery sweeps for orphans)."""
    dirs = [p for t in sorted(root.glob("event_type=*")) if t.is_dir() for p in sorted(t.glob("event_date=*"))
            if p.is_dir()]
    dl = root / DEAD_LETTER_DIR
    return dirs + ([dl] if dl.is_dir() else [])
