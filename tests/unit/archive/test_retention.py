"""Age retention: whole event-date partitions older than `retention_s` leave the archive in one checkpoint, and
their files are deleted after the grace period; import records are deleted once written `retention_s` ago."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pipelines.archive.config import ArchiveConfig
from pipelines.archive.maintenance import maintain
from pipelines.archive.reader import read_dead_letters, read_events
from pipelines.archive.records import CommittedFile
from pipelines.archive.retention import expired, expired_imports, partition_end
from pipelines.archive.state import load_state
from pipelines.archive.wire_import import import_wire
from pipelines.archive.writer import DEAD_LETTERS, EVENTS, FileEntry
from schemas import to_wire
from tests.unit.archive.helpers import T0, FakeLog, all_types, archive_all

DAY = 86400.0


def f(path, event_date=None, committed_at="2026-11-05T00:00:00+00:00"):
    kind = EVENTS if event_date else DEAD_LETTERS
    return CommittedFile(FileEntry(path, kind, 1, 10, "edit_applied" if event_date else None, event_date), "c",
                         committed_at)


def test_a_partition_expires_once_its_end_is_retention_s_ago_and_dead_letters_by_commit_time():
    files = [f("d1", "2026-11-01"), f("d2", "2026-11-02"), f("dl", committed_at="2026-11-02T00:00:00+00:00")]
    end = partition_end("2026-11-01")
    assert end.isoformat() == "2026-11-02T00:00:00+00:00"
    assert expired(files, end + timedelta(days=30) - timedelta(seconds=1), 30 * DAY) == []
    assert [x.entry.path for x in expired(files, end + timedelta(days=30), 30 * DAY)] == ["d1", "dl"]
    assert expired(files, end + timedelta(days=300), 0) == []            # 0 keeps everything


def test_retention_removes_whole_old_partitions_and_keeps_the_rest(tmp_path):
    log = FakeLog(partitions=2)
    old, new = all_types(24), all_types(24, T0 + timedelta(days=1))
    log.produce(old + new)
    archive_all(tmp_path, log, batch_max_events=5)
    now = partition_end(T0.date().isoformat()) + timedelta(days=30)
    cfg = ArchiveConfig(retention_s=30 * DAY, retire_grace_s=600, compact_min_files=10**6)
    r = maintain(tmp_path, cfg, now)
    assert r.partitions_expired == len({e.event_type for e in old}) and r.files_expired > r.partitions_expired
    df = read_events(tmp_path, dedupe=False)
    assert set(df["event_id"]) == {e.event_id for e in new}                 # the old date is gone, whole
    old_dirs = list(tmp_path.glob(f"event_type=*/event_date={T0.date().isoformat()}"))
    assert old_dirs                                                         # within the grace: still stored
    maintain(tmp_path, cfg, now + timedelta(seconds=600))
    assert not list(tmp_path.glob(f"event_type=*/event_date={T0.date().isoformat()}"))   # deleted, folders too
    assert {x.entry.event_date for x in load_state(tmp_path).files if x.entry.kind == EVENTS} == {
        (T0 + timedelta(days=1)).date().isoformat()}
    assert read_events(tmp_path, dedupe=False).height == len(new)


def test_dead_letters_expire_by_their_commit_time(tmp_path):
    log = FakeLog(partitions=1)
    log.produce(all_types(3))
    log.append("telemetry.tools", b"not json", partition=0)
    archive_all(tmp_path, log)
    at = max(datetime.fromisoformat(x.committed_at) for x in load_state(tmp_path).files)
    cfg = ArchiveConfig(retention_s=DAY, compact_min_files=10**6)
    maintain(tmp_path, cfg, at + timedelta(hours=23))
    assert read_dead_letters(tmp_path).height == 1
    maintain(tmp_path, cfg, at + timedelta(days=1))
    assert read_dead_letters(tmp_path).height == 0


def test_import_records_expire_by_when_they_were_written_and_one_of_unknown_age_stays():
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    records = [("old.json", now.timestamp() - 30 * DAY), ("old.dead_letters.jsonl", now.timestamp() - 31 * DAY),
               ("young.json", now.timestamp() - 30 * DAY + 1), ("unknown.json", None)]
    assert expired_imports(records, now, 30 * DAY) == ["old.dead_letters.jsonl", "old.json"]
    assert expired_imports(records, now, 0) == []                                      # 0 keeps everything
    with pytest.raises(ValueError, match="timezone-aware"):
        expired_imports(records, now.replace(tzinfo=None), DAY)


def test_maintenance_deletes_old_import_records_and_a_reimport_still_reads_each_event_once(tmp_path):
    src = tmp_path / "in.jsonl"
    events = all_types(6)
    src.write_bytes(b"".join(to_wire(e) + b"\n" for e in events) + b"not json\n")
    arc = tmp_path / "arc"
    first = import_wire(src, arc)
    records = arc / "_imports"
    assert sorted(p.name for p in records.iterdir()) == sorted([f"{first.import_id}.json",
                                                               f"{first.import_id}.dead_letters.jsonl"])
    written = max(p.stat().st_mtime for p in records.iterdir())
    cfg = ArchiveConfig(retention_s=DAY, compact_min_files=10**6)
    at = datetime.fromtimestamp(written, timezone.utc)
    assert maintain(arc, cfg, at + timedelta(hours=23)).imports_expired == 0          # inside the window: kept
    r = maintain(arc, cfg, at + timedelta(days=1, seconds=1))
    assert r.imports_expired == 2 and not list(records.iterdir())
    assert "2 import records expired" in r.line()
    # the records were no part of idempotency: the same file imported again reads as one copy of each event
    import_wire(src, arc)
    assert sorted(read_events(arc)["event_id"]) == sorted(e.event_id for e in events)
    assert maintain(arc, ArchiveConfig(retention_s=0), at + timedelta(days=400)).imports_expired == 0
