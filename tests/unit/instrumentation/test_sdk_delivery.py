"""TelemetryClient's delivery: spooling on failure, replay in order, restart, close, and transport bugs."""

import logging
import threading

from tests.unit.instrumentation.factories import FakeTransport, both_emit_modes, edit, followup


@both_emit_modes
def test_failed_send_spools_and_replays_in_order_when_the_transport_recovers(make_client, transport, write_ahead):
    client = make_client(write_ahead=write_ahead)
    transport.failing = True
    first = [edit(i) for i in range(100)]
    for e in first:
        client.emit(e)
    assert client.flush(5) is False  # spooled, not delivered
    stats = client.stats()
    assert stats["spooled"] == 100 and stats["spooling"] and stats["sent"] == 0
    second = [edit(i) for i in range(100, 150)]
    for e in second:  # while spooling, new events queue up behind the spool
        client.emit(e)
    transport.failing = False
    assert client.flush(5)
    assert transport.event_ids() == [e.event_id for e in first + second]
    stats = client.stats()
    assert stats["resent"] == 150 and stats["spool_bytes"] == 0 and not stats["spooling"]


def test_spool_replays_on_its_own_after_the_retry_interval(make_client, transport):
    client = make_client(retry_interval_s=0.05)
    transport.failing = True
    event = edit(1)
    client.emit(event)
    assert client.flush(5) is False
    transport.failing = False
    for _ in range(200):  # no flush: the sender's retry timer must do it
        if client.stats()["resent"] == 1:
            break
        threading.Event().wait(0.02)
    assert client.stats()["resent"] == 1 and transport.event_ids() == [event.event_id]


@both_emit_modes
def test_a_new_client_resends_what_a_previous_one_spooled(make_client, tmp_path, write_ahead):
    down = FakeTransport()
    down.failing = True
    first = make_client(transport=down, write_ahead=write_ahead)
    events = [followup(f"message {i}") for i in range(40)]
    for e in events:
        first.emit(e)
    first.close(timeout=5)
    assert first.stats()["spooled"] == 40

    up = FakeTransport()
    second = make_client(transport=up, write_ahead=write_ahead)
    assert second.flush(5)
    assert up.event_ids() == [e.event_id for e in events]  # once: spooled batches were retired from the log
    assert second.stats()["resent"] == 40 and second.stats()["recovered"] == 0


def test_transport_bug_keeps_the_batch_and_the_sender_alive(make_client, caplog):
    class Broken(FakeTransport):
        calls = 0

        def send(self, records):
            self.calls += 1
            if self.calls == 1:
                raise KeyError("bug in a transport")
            super().send(records)

    broken = Broken()
    client = make_client(transport=broken)
    events = [edit(i) for i in range(3)]
    with caplog.at_level(logging.ERROR):
        for e in events:
            client.emit(e)
        assert client.flush(5)
    assert broken.event_ids() == [e.event_id for e in events]
    assert "KeyError" in caplog.text


@both_emit_modes
def test_close_flushes_closes_the_transport_and_warns_about_drops(make_client, transport, caplog, hold_sender,
                                                                   write_ahead):
    client = make_client(queue_size=2, queue_full_policy="drop_newest", write_ahead=write_ahead)
    hold_sender(client, transport)
    for i in range(5):
        client.emit(edit(i))
    transport.release()
    with caplog.at_level(logging.WARNING, logger="instrumentation.sdk"):
        client.close(timeout=5)
    assert transport.closed and len(transport.records) == 3
    assert "dropped events" in caplog.text and "queue_full" in caplog.text


def test_emit_after_close_is_refused_and_counted(make_client, transport):
    client = make_client()
    client.close(timeout=5)
    assert client.emit(edit(1)) is False
    assert client.stats()["dropped"] == {"closed": 1}


def test_close_while_the_transport_hangs_keeps_queued_events_in_the_spool(make_client, transport, hold_sender):
    client = make_client()
    hold_sender(client, transport)
    events = [edit(i) for i in range(10)]
    for e in events:
        client.emit(e)
    client.close(timeout=0.3)  # the sender is stuck in send: the queue goes to disk
    transport.release()
    up = FakeTransport()
    again = make_client(transport=up)
    assert again.flush(5)
    assert up.event_ids() == [e.event_id for e in events]
