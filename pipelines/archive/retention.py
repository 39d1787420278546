"""Age retention of the archive (`archive.retention_s`): which live files have expired, decided from the commit
records alone (pure; `maintenance.py` retires them in one checkpoint, so a reader sees a partition whole or not at
all).

* Data files expire by whole partition: every file of an event date D once the end of D (UTC) is `retention_s`
  or more before now.
* Dead-letter and duplicate files (no event date) expire once committed `retention_s` or more before now.
* Import records (`_imports/<import id>.json` and `<import id>.dead_letters.jsonl`, what `rtrl archive import`
  wrote) expire once written `retention_s` or more before now (`expired_imports`; deleted by the maintenance at
  once: no reader lists them). Nothing reads them back, an import included: a file imported again gets a new
  import id and its events are dropped as duplicates by event id when read, record or no record.

`retention_s = 0` keeps everything.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone

from pipelines.archive.records import CommittedFile


def partition_end(event_date: str) -> datetime:
    """The instant an event date's partition ends (exclusive), UTC."""
    return datetime.combine(date.fromisoformat(event_date) + timedelta(days=1), time(), timezone.utc)


def is_expired(f: CommittedFile, now: datetime, retention_s: float) -> bool:
    if retention_s <= 0:
        return False
    cutoff = now - timedelta(seconds=retention_s)
    if f.entry.event_date:
        return partition_end(f.entry.event_date) <= cutoff
    return datetime.fromisoformat(f.committed_at) <= cutoff


def expired(files: list[CommittedFile], now: datetime, retention_s: float) -> list[CommittedFile]:
    """The files of `files` that retention deletes at `now` (timezone-aware)."""
    if now.tzinfo is None:
        raise ValueError(f"now must be timezone-aware, got naive {now!r}")
    return [f for f in files if is_expired(f, now, retention_s)]


def expired_imports(records: list[tuple[str, float | None]], now: datetime, retention_s: float) -> list[str]:
    """Of the import records `records` ((name, when written as POSIX seconds; None: unknown)), those retention
    deletes at `now` (timezone-aware): written `retention_s` or more before it. One of unknown age is kept."""
    if now.tzinfo is None:
        raise ValueError(f"now must be timezone-aware, got naive {now!r}")
    if retention_s <= 0:
        return []
    cutoff = now.timestamp() - retention_s
    return sorted(name for name, written in records if written is not None and written <= cutoff)


def expired_partitions(files: list[CommittedFile]) -> list[tuple[str, str]]:
    """The (event type, event date) partitions of expired data files, sorted."""
    return sorted({(f.entry.event_type, f.entry.event_date) for f in files if f.entry.event_date})
