"""Client retries (same org and event_id) are dropped within a batch and against a bounded window of recent ids;
another org's event that reuses an id is a different event and is kept, by the archiver and by readers."""

from __future__ import annotations

from pipelines.archive.batch import Batch
from pipelines.archive.dedupe import RecentIds, tenant_key
from pipelines.archive.messages import SourceMessage
from pipelines.archive.reader import read_events
from schemas import to_wire
from tests.unit.archive.helpers import FakeLog, all_types, archive_all, make_archiver, make_event


def test_duplicates_within_a_batch_are_dropped_and_counted():
    e, other = make_event(), make_event()
    batch = Batch(RecentIds(100))
    for off, ev in enumerate([e, other, e, e]):
        batch.add(SourceMessage("telemetry.edits", 0, off, to_wire(ev)))
    [pb] = batch.partitions.values()
    assert [(ev.event_id, off) for ev, off in pb.events] == [(e.event_id, 0), (other.event_id, 1)]
    assert pb.duplicates == 2 and (pb.first_offset, pb.last_offset, pb.messages) == (0, 3, 4)


def test_window_is_bounded_and_forgets_the_oldest_first():
    w = RecentIds(3)
    w.add_all(["a", "b", "c"])
    w.add_all(["d"])
    assert "a" not in w and all(x in w for x in "bcd") and len(w) == 3
    w.add_all(["b", "e"])  # re-adding refreshes b
    assert "b" in w and "c" not in w


def test_a_retry_in_a_later_batch_is_dropped(tmp_path):
    log = FakeLog(partitions=1)
    events = all_types(7)
    log.produce(events)
    log.produce(events[:3])  # the client retried three of them after a lost ack
    stats, _ = archive_all(tmp_path, log, batch_max_events=7)
    assert stats.batches == 2 and stats.duplicates_dropped == 3 and stats.events_written == 7
    assert read_events(tmp_path, dedupe=False).height == 7


def test_the_window_is_rebuilt_from_the_archive_at_start_up(tmp_path):
    log = FakeLog(partitions=1)
    events = all_types(7)
    log.produce(events)
    archive_all(tmp_path, log)
    log.produce([events[0]])  # a retry that arrives after a restart
    stats, _ = archive_all(tmp_path, log)
    assert stats.duplicates_dropped == 1 and stats.events_written == 0
    assert read_events(tmp_path, dedupe=False).height == 7


def test_window_rebuild_takes_the_newest_ids_up_to_its_size(tmp_path):
    log = FakeLog(partitions=1)
    old, new = all_types(7), all_types(7)
    log.produce(old)
    archive_all(tmp_path, log)
    log.produce(new)
    archive_all(tmp_path, log)
    a, _ = make_archiver(tmp_path, log, dedupe_window=7)
    rec = a.start()
    a.close()
    assert set(rec.recent_ids) == {tenant_key(e) for e in new}
    assert all(tenant_key(e) in a.window for e in new) and not any(tenant_key(e) in a.window for e in old)


def test_window_of_zero_still_dedupes_within_a_batch(tmp_path):
    log = FakeLog(partitions=1)
    e = make_event()
    log.produce([e, e])
    stats, _ = archive_all(tmp_path, log, dedupe_window=0)
    assert stats.duplicates_dropped == 1 and stats.events_written == 1


def test_another_orgs_event_with_the_same_id_is_kept_by_the_archiver_and_by_readers(tmp_path):
    log = FakeLog(partitions=1)
    a = make_event()
    b = a.model_copy(update={"org_id": "org-b", "user_id": "u-of-b"})    # org B reuses org A's event id
    log.produce([a, b, a])                                                # and A's own retry
    stats, _ = archive_all(tmp_path, log)
    assert stats.events_written == 2 and stats.duplicates_dropped == 1
    log.produce([b])                                                      # B's retry after a restart
    assert archive_all(tmp_path, log)[0].duplicates_dropped == 1
    rows = read_events(tmp_path)
    assert sorted(zip(rows["org_id"], rows["event_id"])) == sorted([tenant_key(a), tenant_key(b)])
    assert set(rows.filter(rows["org_id"] == "org-b")["user_id"]) == {"u-of-b"}
