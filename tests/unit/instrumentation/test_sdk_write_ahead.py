"""Write-ahead emit (`sdk.write_ahead`): what a SIGKILLed process emitted is delivered by the next client on its
directory, acknowledged records are not resent, and the log falls back to the spool and stays small."""

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from instrumentation.wal import WAL_DIR, WriteAheadLog
from tests.unit.instrumentation.factories import FakeTransport, edit
from tests.unit.instrumentation.killed_emitter import BATCH, event_id

REPO = Path(__file__).parents[3]


def run_killed_emitter(tmp_path: Path, flushed: int, emitted: int, acked_sends: int) -> list[str]:
    """Run `killed_emitter` on `tmp_path/spool`, SIGKILL it as soon as its last `emit` returned, and return the
    event_ids its transport acknowledged."""
    ack_file = tmp_path / "acked.txt"
    ack_file.touch()
    argv = [sys.executable, "-m", "tests.unit.instrumentation.killed_emitter", str(tmp_path / "spool"), str(ack_file),
            str(flushed), str(emitted), str(acked_sends)]
    child = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
    finally:
        child.kill()  # SIGKILL: no close, no flush, no atexit
        child.wait(30)
        child.stdout.close()
    assert line == "emitted\n" and child.returncode == -signal.SIGKILL
    return ack_file.read_text().split()


@pytest.mark.integration
@pytest.mark.parametrize("write_ahead", [True, False], ids=["next_client_writes_ahead", "next_client_does_not"])
def test_every_event_emitted_before_a_sigkill_is_delivered_by_the_next_client(tmp_path, make_client, write_ahead):
    acked = run_killed_emitter(tmp_path, flushed=0, emitted=1000, acked_sends=2)
    up = FakeTransport()
    client = make_client(transport=up, spool_dir=tmp_path / "spool", write_ahead=write_ahead)
    assert client.flush(10)
    resent = up.event_ids()
    expected = [event_id(i) for i in range(1000)]
    assert acked == expected[:len(acked)] and 0 < len(acked) <= 2 * BATCH  # two acknowledged sends
    duplicates = len(acked) + len(resent) - len(expected)
    # The acknowledged sends were retired before the hang began, so none is resent: every event arrives exactly
    # once, the unacknowledged ones in emit order. (A kill between an acknowledgement and its retirement would
    # resend that one batch: at most BATCH copies.)
    assert resent == expected[len(acked):] and duplicates == 0
    assert client.stats()["recovered"] == len(resent)


@pytest.mark.integration
def test_a_restart_resends_only_the_unretired_tail_never_what_was_acknowledged(tmp_path, make_client):
    acked = run_killed_emitter(tmp_path, flushed=300, emitted=200, acked_sends=0)
    assert acked == [event_id(i) for i in range(300)]
    up = FakeTransport()
    client = make_client(transport=up, spool_dir=tmp_path / "spool", write_ahead=True)
    assert client.flush(10)
    assert up.event_ids() == [event_id(i) for i in range(300, 500)]
    assert client.stats()["recovered"] == 200


def test_a_delivered_log_keeps_only_its_current_segment_on_disk(make_client, transport, tmp_path):
    client = make_client(write_ahead=True, spool_segment_bytes=4096)
    for i in range(500):  # ~100 KiB of records: ~25 segments of 4 KiB
        client.emit(edit(i))
    assert client.flush(5)
    assert len(transport.records) == 500
    assert len(list((tmp_path / "spool" / WAL_DIR).glob("seg-*.log"))) == 1


def test_close_while_the_transport_hangs_leaves_queue_and_batch_in_flight_to_the_next_client(make_client, transport,
                                                                                             hold_sender):
    client = make_client(write_ahead=True)
    hold_sender(client, transport)  # edit(-1) is in flight, never acknowledged before close
    events = [edit(i) for i in range(10)]
    for e in events:
        client.emit(e)
    client.close(timeout=0.3)
    transport.release()
    up = FakeTransport()
    again = make_client(transport=up, write_ahead=True)
    assert again.flush(5)
    delivered = up.events()
    assert [d["request_id"] for d in delivered] == ["req--1"] + [f"req-{i}" for i in range(10)]
    assert [d["event_id"] for d in delivered[1:]] == [e.event_id for e in events]


def test_an_unwritable_log_sends_the_event_through_the_spool(make_client, transport, monkeypatch, caplog):
    client = make_client(write_ahead=True)

    def disk_full(self, record):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(WriteAheadLog, "log", disk_full)
    event = edit(1)
    with caplog.at_level(logging.ERROR, logger="instrumentation.sdk"):
        assert client.emit(event)
    assert client.stats()["spooled"] == 1 and "cannot write the write-ahead log" in caplog.text
    assert client.flush(5)
    assert transport.event_ids() == [event.event_id]


def test_emit_leaves_the_fsync_of_the_log_to_the_sender_thread(make_client, transport, tmp_path, monkeypatch):
    wal_dir = str(tmp_path / "spool" / WAL_DIR)
    synced: list[str] = []  # the thread that fsynced the log's segment or directory
    real_fsync = os.fsync

    def recording_fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(wal_dir):
            synced.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    client = make_client(write_ahead=True, spool_fsync_every=10)
    for i in range(100):
        client.emit(edit(i))
    assert client.flush(5)
    assert synced and set(synced) == {"rtrl-sdk-test"}
