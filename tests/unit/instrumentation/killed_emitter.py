"""A process that emits in write-ahead mode and then waits to be SIGKILLed (for test_sdk_write_ahead.py).

    python -m tests.unit.instrumentation.killed_emitter SPOOL_DIR ACK_FILE FLUSHED EMITTED ACKED_SENDS

Emits events 0..FLUSHED-1 and flushes them (the transport acknowledges every send), then emits EMITTED more: the
transport acknowledges ACKED_SENDS more sends and then never returns from `send` (a hung broker). Half of those
events are emitted before that hang begins, half while a send hangs, so the log holds retired records, a batch in
flight and queued records. Every acknowledged event_id is appended to ACK_FILE before `send` returns. Prints
"emitted" right after the last `emit` returned, then blocks until killed.
"""

from __future__ import annotations

import sys
import threading
import uuid

from instrumentation.config import SdkConfig
from instrumentation.sdk import TelemetryClient
from tests.unit.instrumentation.factories import decoded, edit

BATCH = 50


def event_id(i: int) -> str:
    return str(uuid.UUID(int=i + 1, version=4))


def events(start: int, n: int) -> list:
    return [edit(i, event_id=event_id(i)) for i in range(start, start + n)]


class AckThenHang:
    def __init__(self, ack_file: str):
        self.acks = open(ack_file, "a")
        self.sends_left: int | None = None  # None: acknowledge every send
        self.hanging = threading.Event()

    def send(self, records) -> None:
        if self.sends_left is not None:
            if self.sends_left == 0:
                self.hanging.set()
                threading.Event().wait()  # never acknowledges
            self.sends_left -= 1
        self.acks.write("".join(d["event_id"] + "\n" for d in decoded(records)))
        self.acks.flush()

    def close(self) -> None:
        pass


def main(argv: list[str]) -> None:
    spool_dir, ack_file = argv[0], argv[1]
    flushed, emitted, acked_sends = map(int, argv[2:5])
    transport = AckThenHang(ack_file)
    client = TelemetryClient(transport, SdkConfig(write_ahead=True, batch_size=BATCH, linger_ms=5), spool_dir,
                             name="killed")
    for e in events(0, flushed):
        client.emit(e)
    assert client.flush(30)
    transport.sends_left = acked_sends
    later = events(flushed, emitted)
    half = emitted // 2
    for e in later[:half]:
        client.emit(e)
    assert transport.hanging.wait(30)
    for e in later[half:]:
        client.emit(e)
    print("emitted", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1:])
