"""`TelemetryClient`: the SDK object an editor, agent or harness holds to emit events (docs/ingest.md).

    client = TelemetryClient(KafkaTransport("127.0.0.1:19092"), cfg.sdk, spool_dir)
    client.emit(event)          # never waits for I/O: sampling, a bounded in-memory queue, return
    client.flush(timeout=5)     # everything emitted so far is sent or spooled
    client.close()

`emit` decides sampling (per event type, deterministic by event_id, so every client and every retry agrees),
appends to a bounded deque and returns; it takes one uncontended lock for a few instructions and signals the
sender only when a batch is full or the sender is idle. When the queue is full, `queue_full_policy` decides:
drop the new event, evict the oldest, or write the new event to the spool on the caller's thread.

One background sender thread (`instrumentation.sender`) takes batches (`batch_size`, waiting up to `linger_ms`
to fill one), applies privacy mode and secret redaction, serializes, and calls `transport.send`. When a send
fails the batch goes to the on-disk spool (`instrumentation.spool`) and the client is *spooling*: later batches
are appended behind it and the spool is replayed in order every `retry_interval_s`; once it is empty, batches
go straight to the transport again. Events are delivered at least once; `event_id` dedupes.
Order is kept per client except for events spooled on queue overflow, which may overtake events still queued.
The event objects handed to `emit` are not modified (do not modify them after emitting either).

With `write_ahead` (`instrumentation.wal`), `emit` also prepares the record and appends it to a write-ahead log
on the caller's thread, so the event survives a kill of the process from the moment `emit` returns; the sender
retires it there once it was acknowledged or spooled. Every client moves what a killed predecessor left in that
log to its spool when it starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path
from zlib import crc32

from instrumentation.config import SdkConfig
from instrumentation.sender import Counters, Sender
from instrumentation.spool import Position, Spool, SpoolError
from instrumentation.transport import Record, Transport
from instrumentation.wal import WAL_DIR, WriteAheadLog
from schemas import EVENT_TYPES, Event

log = logging.getLogger(__name__)


def keep_threshold(rate: float) -> int:
    """Events whose crc32(event_id) is below this are kept: `rate` of them, the same ones everywhere."""
    return int(rate * 2**32)


class TelemetryClient:
    def __init__(self, transport: Transport, config: SdkConfig, spool_dir: str | Path, name: str = "client"):
        self.name, self.config = name, config
        self._transport = transport
        self._spool = Spool(spool_dir, max_bytes=config.spool_max_bytes, fsync_every=config.spool_fsync_every,
                            segment_bytes=config.spool_segment_bytes)
        self._queue: deque[Event] = deque()
        self._queue_size, self._batch_size = config.queue_size, config.batch_size
        self._policy = config.queue_full_policy
        self._thresholds = {t: keep_threshold(rate) for t, rate in config.sampling.items()}
        if unknown := sorted(set(config.sampling) - set(EVENT_TYPES)):
            log.warning("telemetry client %r: sdk.sampling names unknown event types %s (known: %s)",
                        name, unknown, sorted(EVENT_TYPES))
        self._counters = Counters()
        self._lock = self._counters.lock  # guards the queue bound and every counter, for a few instructions
        self._wal = self._recover(spool_dir, config)
        self._log_lock = threading.Lock()  # write-ahead: log order is queue order (held around both appends)
        self._accepting, self._closed = True, False
        self._sender = Sender(self._queue, self._counters, transport, self._spool, config, name, self._wal)
        self._wake = self._sender.wake
        self._sender.start()

    def _recover(self, spool_dir: str | Path, config: SdkConfig) -> WriteAheadLog | None:
        """Move what a killed predecessor left in the write-ahead log to the spool (sent first, in order); the
        open log when this client writes ahead."""
        if not (config.write_ahead or (Path(spool_dir) / WAL_DIR).is_dir()):
            return None
        wal = WriteAheadLog.under(spool_dir, config)
        moved, refused = wal.move_to(self._spool, config.batch_size)
        if moved or refused:
            log.warning("telemetry client %r: %d events left in the write-ahead log by a previous process go out "
                        "through the spool (%d refused: spool full)", self.name, moved + refused, refused)
        with self._lock:
            self._counters.recovered += moved
            if refused:
                self._counters.dropped["spool_full"] += refused
        if config.write_ahead:
            return wal
        wal.close()
        return None

    def emit(self, event: Event) -> bool:
        """Queue `event` for sending. Returns False when it was sampled out or dropped (see `stats()`)."""
        threshold = self._thresholds.get(event.event_type)
        if threshold is not None and crc32(event.event_id.encode()) >= threshold:
            with self._lock:
                self._counters.sampled_out += 1
            return False
        if self._wal is not None:
            return self._emit_ahead(event)
        q = self._queue
        with self._lock:
            room = (self._accepting and len(q) < self._queue_size) or self._make_room()  # inline: the common case
            if room:
                q.append(event)
                self._counters.enqueued += 1
        if room is None:  # queue full, policy "spool": to disk on the caller's thread
            return self._to_spool(self._sender.records([event]))
        if room and (self._sender.idle or len(q) >= self._batch_size):
            self._wake.set()
        return bool(room)

    def _emit_ahead(self, event: Event) -> bool:
        """Write-ahead `emit`: prepare here, log, then queue the record with its log position."""
        records = self._sender.records([event])
        if not records:  # invalid or too large: dropped and counted
            return False
        record = records[0]
        with self._log_lock:
            with self._lock:
                room = self._make_room()
            if room:
                end = self._log(record)
                if end is None:
                    room = None
                else:
                    with self._lock:
                        self._queue.append((record, end))
                        self._counters.enqueued += 1
        if room is None:  # queue full under policy "spool", or the log full or unwritable: to the spool
            return self._to_spool(records)
        if room and (self._sender.idle or len(self._queue) >= self._batch_size):
            self._wake.set()
        return bool(room)

    def _log(self, record: Record) -> Position | None:
        try:
            return self._wal.log(record)
        except (SpoolError, OSError) as e:
            log.error("telemetry client %r: cannot write the write-ahead log: %s", self.name, e)
            return None

    def _make_room(self) -> bool | None:
        """Called under the lock, before queueing one event: True when it may be queued (the oldest evicted under
        `drop_oldest`), False when it is dropped (counted), None when it goes to the spool (policy `spool`)."""
        if self._accepting and len(self._queue) < self._queue_size:
            return True
        c = self._counters
        if not self._accepting:
            c.dropped["closed"] += 1
            return False
        if self._policy == "drop_oldest":
            try:
                self._queue.popleft()
                c.dropped["oldest_evicted"] += 1
            except IndexError:  # the sender emptied it meanwhile
                pass
            return True
        if self._policy == "drop_newest":
            c.dropped["queue_full"] += 1
            return False
        return None

    def _to_spool(self, records: list[Record]) -> bool:
        taken = self._sender.to_spool(records) if records else 0
        self._wake.set()
        return taken > 0

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event emitted before this call is sent or spooled (on disk), and one replay of the
        spool has been tried. True when that happened within `timeout` and nothing is left in the spool."""
        return self._sender.flush(timeout) and self._spool.empty

    def close(self, timeout: float = 30.0) -> None:
        """Flush, stop the sender, close spool and transport. Logs a warning if anything was dropped."""
        if self._closed:
            return
        deadline = time.monotonic() + timeout
        with self._log_lock, self._lock:
            self._accepting = False
        self.flush(timeout)
        if not self._sender.stop(max(0.0, deadline - time.monotonic())):
            leftover = self._sender.take(len(self._queue))  # stuck in transport.send: keep the queue on disk
            if self._wal is not None:  # the queue and the batch in flight are in the log already
                log.warning("telemetry client %r: sender did not stop within %.1fs; %d queued events stay in the "
                            "write-ahead log for the next client", self.name, timeout, len(leftover))
            else:
                log.warning("telemetry client %r: sender did not stop within %.1fs; spooling %d queued events",
                            self.name, timeout, len(leftover))
                self._sender.to_spool(self._sender.records(leftover))
        self._closed = True
        if self._wal is not None:
            self._wal.close()
        self._spool.close()
        try:
            self._transport.close()
        except Exception as e:  # noqa: BLE001 -- a transport failing to close must not lose the stats below
            log.warning("telemetry client %r: closing the transport failed: %s", self.name, e)
        stats = self.stats()
        if stats["dropped"]:
            log.warning("telemetry client %r closed having dropped events: %s (sent %d, spooled %d, pending in "
                        "spool %d bytes)", self.name, stats["dropped"], stats["sent"], stats["spooled"],
                        stats["spool_bytes"])

    def __enter__(self) -> "TelemetryClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stats(self) -> dict:
        """Counts since this client started: enqueued, sent, spooled, resent (from the spool), sampled_out,
        redacted (secrets), dropped (by reason), recovered (left in the write-ahead log by a previous process and
        moved to the spool at start), plus spool_bytes, queue_depth and whether it is spooling."""
        spooling = not self._spool.empty or not self._sender.healthy
        c = self._counters
        with self._lock:
            return {"enqueued": c.enqueued, "sent": c.sent, "spooled": c.spooled, "resent": c.resent,
                    "sampled_out": c.sampled_out, "redacted": c.redacted, "dropped": dict(c.dropped),
                    "recovered": c.recovered,
                    "spool_bytes": self._spool.bytes, "queue_depth": len(self._queue), "spooling": spooling}
