"""TelemetryClient on the caller's side: ordering, sampling, queue-full policies, privacy, redaction, stats."""

import logging
import threading
import uuid
from datetime import datetime, timezone

from instrumentation.sdk import keep_threshold
from schemas.events import FollowupMessage
from tests.unit.instrumentation.factories import (FakeTransport, both_emit_modes, edit, envelope, followup, snapshot,
                                                  tool_result, trajectory)

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


@both_emit_modes
def test_emitted_events_arrive_in_order_with_their_event_ids(make_client, transport, write_ahead):
    client = make_client(write_ahead=write_ahead)
    events = [edit(i) for i in range(300)]
    assert all(client.emit(e) for e in events)
    assert client.flush(5)
    assert transport.event_ids() == [e.event_id for e in events]
    assert max(transport.batches) <= 50  # batch_size


def test_sampling_keeps_the_same_events_in_every_client(make_client, tmp_path):
    events = [snapshot() for _ in range(2000)]
    kept = []
    for n in range(2):
        t = FakeTransport()
        c = make_client(transport=t, spool_dir=tmp_path / f"s{n}", sampling={"codebase_snapshot": 0.5})
        kept.append({e.event_id for e in events if c.emit(e)})
        assert c.flush(5)
        assert set(t.event_ids()) == kept[-1]
    assert kept[0] == kept[1]


def test_sampling_rate_matches_the_configured_fraction(make_client):
    client = make_client(sampling={"codebase_snapshot": 0.3})
    kept = sum(client.emit(snapshot()) for _ in range(10_000))
    assert 2_850 <= kept <= 3_150  # 0.3 of 10,000 +- 3.5 sigma (sigma = 46); ids come from a seeded generator
    assert client.stats()["sampled_out"] == 10_000 - kept


def test_sampling_applies_only_to_listed_types_and_zero_keeps_none(make_client):
    client = make_client(sampling={"codebase_snapshot": 0.0, "edit_applied": 1.0})
    assert not any(client.emit(snapshot()) for _ in range(200))
    assert all(client.emit(edit(i)) for i in range(200))
    assert all(client.emit(followup()) for _ in range(200))


def test_sampling_key_that_names_no_event_type_is_reported(make_client, caplog):
    with caplog.at_level(logging.WARNING, logger="instrumentation.sdk"):
        make_client(sampling={"codebase_snapshots": 0.5})
    assert "unknown event types ['codebase_snapshots']" in caplog.text


def test_keep_threshold_is_the_rate_of_the_crc_range():
    assert keep_threshold(0.0) == 0 and keep_threshold(1.0) == 2**32 and keep_threshold(0.25) == 2**30


@both_emit_modes
def test_drop_newest_keeps_the_oldest_and_counts_queue_full(make_client, transport, hold_sender, write_ahead):
    client = make_client(queue_size=10, queue_full_policy="drop_newest", write_ahead=write_ahead)
    hold_sender(client, transport)
    events = [edit(i) for i in range(25)]
    accepted = [client.emit(e) for e in events]
    assert accepted == [True] * 10 + [False] * 15
    assert client.stats()["dropped"] == {"queue_full": 15} and client.stats()["queue_depth"] == 10
    transport.release()
    assert client.flush(5)
    assert transport.event_ids()[1:] == [e.event_id for e in events[:10]]


@both_emit_modes
def test_drop_oldest_keeps_the_newest_and_counts_evictions(make_client, transport, hold_sender, write_ahead):
    client = make_client(queue_size=10, queue_full_policy="drop_oldest", write_ahead=write_ahead)
    hold_sender(client, transport)
    events = [edit(i) for i in range(25)]
    assert all(client.emit(e) for e in events)
    assert client.stats()["dropped"] == {"oldest_evicted": 15}
    transport.release()
    assert client.flush(5)
    assert transport.event_ids()[1:] == [e.event_id for e in events[15:]]


@both_emit_modes
def test_spool_policy_writes_overflow_to_disk_on_the_caller_thread_and_delivers_it(make_client, transport,
                                                                                     hold_sender, write_ahead):
    client = make_client(queue_size=10, queue_full_policy="spool", write_ahead=write_ahead)
    hold_sender(client, transport)
    events = [edit(i) for i in range(25)]
    assert all(client.emit(e) for e in events)
    stats = client.stats()
    assert stats["spooled"] == 15 and stats["spool_bytes"] > 0 and stats["dropped"] == {}
    transport.release()
    assert client.flush(5)
    assert sorted(transport.event_ids()[1:]) == sorted(e.event_id for e in events)
    stats = client.stats()  # the queued 10 were sent directly or spooled behind the overflow, depending on timing
    assert stats["resent"] == stats["spooled"] >= 15 and stats["sent"] + stats["resent"] == 26
    assert stats["spool_bytes"] == 0


@both_emit_modes
def test_privacy_mode_in_config_strips_content_from_every_event(make_client, transport, write_ahead):
    client = make_client(privacy_mode=True, write_ahead=write_ahead)
    for e in (followup("please fix the bug"), trajectory(), tool_result("file src/a.py not found")):
        client.emit(e)
    assert client.flush(5)
    msg, traj, tool = transport.events()
    assert msg["text"] == "" and msg["privacy_mode"] is True
    assert traj["prompt_token_ids"] == [] and traj["completion_token_ids"] == [] and traj["behaviour_logprobs"] == []
    assert tool["error_message"] == "" and tool["error_kind"] == "tool_error"


def test_privacy_mode_of_the_event_alone_strips_its_content(make_client, transport):
    client = make_client()
    event = trajectory()
    private = event.model_copy(update={"privacy_mode": True})  # as a client that forgot to empty the fields
    client.emit(private)
    client.emit(followup("kept"))
    assert client.flush(5)
    traj, msg = transport.events()
    assert traj["completion_token_ids"] == [] and msg["text"] == "kept"
    assert private.completion_token_ids == [4, 5]  # the caller's object is not modified


@both_emit_modes
def test_secrets_are_redacted_in_every_free_text_field_on_the_wire(make_client, transport, write_ahead):
    client = make_client(write_ahead=write_ahead)
    text = f"deploy failed with key {AWS_KEY}"
    client.emit(followup(text))
    client.emit(tool_result(f"auth error: password=hunter2x for {AWS_KEY}"))
    client.emit(trajectory(tool_error=f'bad args {{"api_key": "{AWS_KEY}"}}'))
    assert client.flush(5)
    wire = "".join(r.value.decode() for r in transport.records)
    assert AWS_KEY not in wire and "hunter2x" not in wire
    msg, tool, traj = transport.events()
    assert msg["text"] == "deploy failed with key [REDACTED:aws_access_key_id]"
    assert "[REDACTED:" in tool["error_message"] and "[REDACTED:" in traj["tool_calls"][0]["error"]
    assert client.stats()["redacted"] == 4


def test_ids_and_enums_are_not_redacted(make_client, transport):
    client = make_client()
    client.emit(followup(f"key {AWS_KEY}", user_id=AWS_KEY, session_id="token=abc123def456"))
    assert client.flush(5)
    (msg,) = transport.events()
    assert msg["user_id"] == AWS_KEY and msg["session_id"] == "token=abc123def456"
    assert msg["text"] == "key [REDACTED:aws_access_key_id]"


def test_redaction_can_be_turned_off(make_client, transport):
    client = make_client(redact_secrets=False)
    client.emit(followup(f"key {AWS_KEY}"))
    assert client.flush(5)
    assert transport.events()[0]["text"] == f"key {AWS_KEY}" and client.stats()["redacted"] == 0


@both_emit_modes
def test_too_large_event_is_dropped_and_counted(make_client, transport, write_ahead):
    client = make_client(write_ahead=write_ahead)
    huge = FollowupMessage.model_construct(**envelope(), event_type="followup_message", schema_version=1,
                                           privacy_mode=False, received_time=None, previous_request_id=None,
                                           text="x" * (5 * 1024 * 1024))
    client.emit(huge)
    client.emit(edit(1))
    assert client.flush(10)
    assert len(transport.records) == 1 and client.stats()["dropped"] == {"too_large": 1}


def test_received_time_is_stamped_only_for_transports_that_ask(make_client, tmp_path):
    class Direct(FakeTransport):
        stamps_received_time = True

    direct, plain = Direct(), FakeTransport()
    before = datetime.now(timezone.utc)
    for n, t in enumerate((direct, plain)):
        c = make_client(transport=t, spool_dir=tmp_path / f"s{n}")
        c.emit(edit(1))
        assert c.flush(5)
    after = datetime.now(timezone.utc)
    assert before <= datetime.fromisoformat(direct.events()[0]["received_time"]) <= after  # stamped when sent
    assert plain.events()[0]["received_time"] is None


@both_emit_modes
def test_many_threads_emitting_lose_nothing(make_client, transport, write_ahead):
    client = make_client(batch_size=100, write_ahead=write_ahead)
    ids: list[list[str]] = [[] for _ in range(8)]

    def worker(k):
        for i in range(2000):
            e = edit(i, event_id=str(uuid.uuid4()))
            ids[k].append(e.event_id)
            client.emit(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client.flush(10)
    got = transport.event_ids()
    assert sorted(got) == sorted(i for chunk in ids for i in chunk)
    for chunk in ids:  # each thread's events keep their order
        positions = {eid: n for n, eid in enumerate(got)}
        assert [positions[i] for i in chunk] == sorted(positions[i] for i in chunk)
    stats = client.stats()
    assert stats["enqueued"] == stats["sent"] == 16_000


@both_emit_modes
def test_stats_account_for_every_event(make_client, transport, hold_sender, write_ahead):
    client = make_client(queue_size=5, queue_full_policy="drop_newest", sampling={"codebase_snapshot": 0.5},
                         write_ahead=write_ahead)
    hold_sender(client, transport)
    for _ in range(20):
        client.emit(snapshot())
    for i in range(20):
        client.emit(edit(i))
    transport.release()
    assert client.flush(5)
    s = client.stats()
    assert s["sampled_out"] + s["enqueued"] + sum(s["dropped"].values()) == 41  # + the held event
    assert s["sent"] == s["enqueued"] == len(transport.records) and s["queue_depth"] == 0
