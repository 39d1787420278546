"""Messages that do not parse or validate go to the dead-letter topic and Parquet, counted by reason."""

from __future__ import annotations

import json

import pytest

from pipelines.archive import deadletter as dl
from pipelines.archive.batch import Batch
from pipelines.archive.dedupe import RecentIds
from pipelines.archive.manifest import load_manifests
from pipelines.archive.messages import SourceMessage
from pipelines.archive.reader import read_dead_letters, read_events
from schemas import to_wire
from schemas.wire import MAX_WIRE_BYTES
from tests.unit.archive.helpers import FakeLog, RecordingSink, all_types, archive_all, make_archiver, make_event


def _json(**changes) -> bytes:
    d = json.loads(to_wire(make_event("tool_call_result")))
    d.update(changes)
    return json.dumps(d).encode()


@pytest.mark.parametrize("value, reason, field", [
    (None, dl.EMPTY, "<event>"),
    (b"{not json", dl.INVALID_JSON, "<event>"),
    (b"\xff\xfe", dl.INVALID_JSON, "<event>"),
    (b"[1, 2]", dl.NOT_AN_OBJECT, "<event>"),
    (b" " * (MAX_WIRE_BYTES + 1), dl.TOO_LARGE, "<event>"),
    (_json(event_type="telepathy"), dl.UNKNOWN_TYPE, "event_type"),
    (_json(schema_version=99), dl.BAD_VERSION, "schema_version"),
    (_json(event_id="not-a-uuid"), dl.INVALID_FIELD, "event_id"),
    (_json(ok=True, error_kind="timeout"), dl.INVALID_FIELD, "<event>"),
])
def test_bad_message_becomes_a_dead_letter_with_its_reason_and_field(value, reason, field):
    batch = Batch(RecentIds(10))
    batch.add(SourceMessage("telemetry.tools", 0, 3, value, b"k"))
    [letter] = batch.dead_letters
    assert (letter.reason, letter.field) == (reason, field)
    assert letter.message.value == value and batch.events == 0
    headers = dict(letter.headers("c1"))
    assert headers["rtrl.dlq.reason"] == reason.encode()
    assert headers["rtrl.dlq.source_topic"] == b"telemetry.tools"
    assert headers["rtrl.dlq.source_offset"] == b"3"
    assert headers["rtrl.dlq.source_cluster_id"] == b"c1"


def test_dead_letters_are_published_archived_and_counted_while_good_events_keep_flowing(tmp_path):
    log = FakeLog(partitions=1)
    before, after = all_types(7), all_types(7)
    log.produce(before)
    log.append("telemetry.tools", b"{oops", key=b"u", partition=0)
    log.append("telemetry.tools", _json(event_id="nope"), partition=0)
    log.append("telemetry.edits", None, partition=0)
    log.produce(after)
    sink = RecordingSink()
    stats, _ = archive_all(tmp_path, log, sink=sink, batch_max_events=5)
    assert stats.dead_letters == {"invalid_json": 1, "invalid_field": 1, "empty_message": 1}
    assert set(read_events(tmp_path)["event_id"]) == {e.event_id for e in before + after}
    dead = read_dead_letters(tmp_path)
    assert sorted(zip(dead["topic"], dead["reason"])) == [
        ("telemetry.edits", "empty_message"), ("telemetry.tools", "invalid_field"), ("telemetry.tools", "invalid_json")]
    assert b"{oops" in dead["value"].to_list()
    assert sorted(d.reason for d, cid in sink.published) == ["empty_message", "invalid_field", "invalid_json"]
    assert {cid for _, cid in sink.published} == {"cluster-a"}


def test_a_dead_letter_topic_that_cannot_be_reached_leaves_the_batch_uncommitted(tmp_path):
    log = FakeLog(partitions=1)
    good = all_types(3)
    log.produce(good)
    log.append("telemetry.tools", b"{oops", partition=0)
    a, _ = make_archiver(tmp_path, log, sink=RecordingSink(fail=ConnectionError("broker down")))
    with pytest.raises(ConnectionError):
        a.run(until_idle_s=1.0)
    assert load_manifests(tmp_path) == []  # nothing committed: the next start re-reads and republishes
    stats, _ = archive_all(tmp_path, log)
    assert stats.orphans_deleted > 0
    assert set(read_events(tmp_path)["event_id"]) == {e.event_id for e in good}
    assert read_dead_letters(tmp_path).height == 1
