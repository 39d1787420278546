"""The SDK's sender thread: takes batches off the client's queue and delivers them, through the spool if need be.

Each round it (1) sends what is queued, in batches of `batch_size` (after waiting up to `linger_ms` for a batch
to fill), each event prepared by `instrumentation.prepare` (privacy mode, redaction, serialization); (2) replays
the spool when a retry is due. A failed send puts the batch in the spool and makes the sender *spooling*: while
the spool holds anything, new batches are appended behind it (order is kept) and the spool is replayed in order
every `retry_interval_s`; once it is empty, batches go straight to the transport again.

In write-ahead mode (`wal` given, `instrumentation.wal`) the queue holds (record, log position) pairs that `emit`
already prepared and logged; once a batch was sent or spooled the sender retires it in the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from typing import Sequence

from instrumentation.config import SdkConfig
from instrumentation.prepare import prepare
from instrumentation.spool import Spool, SpoolError
from instrumentation.transport import Record, Transport, TransportError
from instrumentation.wal import WriteAheadLog
from schemas import Event
from schemas.wire import MAX_WIRE_BYTES

log = logging.getLogger("instrumentation.sdk")
IDLE_WAIT_S = 1.0


class Counters:
    """Every count `TelemetryClient.stats()` reports, behind one lock that is held for a few instructions."""

    def __init__(self):
        self.lock = threading.Lock()
        self.enqueued = self.sent = self.spooled = self.resent = self.sampled_out = self.redacted = 0
        self.recovered = 0  # records a killed process left in the write-ahead log, moved to the spool at start
        self.dropped: Counter[str] = Counter()

    def add(self, name: str, n: int) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)


class Sender:
    def __init__(self, queue: deque, counters: Counters, transport: Transport, spool: Spool, config: SdkConfig,
                 name: str, wal: WriteAheadLog | None = None):
        self.queue, self.counters, self.transport, self.spool, self.config, self.name = (
            queue, counters, transport, spool, config, name)
        self.wal = wal
        self.wake = threading.Event()  # set by emit (batch full / sender idle), flush and stop
        self.idle = False              # read by emit: the sender sleeps until woken, not just for linger_ms
        self.stopping = False
        self._stamp_received = bool(getattr(transport, "stamps_received_time", False))
        self._batch_size, self._linger_s = config.batch_size, config.linger_ms / 1000
        self._flushed = threading.Condition()
        self._flush_requested = self._flush_done = 0
        self._healthy, self._next_retry = True, 0.0
        self._thread = threading.Thread(target=self._run, name=f"rtrl-sdk-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def healthy(self) -> bool:
        return self._healthy

    def flush(self, timeout: float) -> bool:
        """Wait for a round that began after this call to finish (queue sent or spooled, spool replay tried)."""
        with self._flushed:
            self._flush_requested += 1
            mine = self._flush_requested
        self.wake.set()
        with self._flushed:
            return self._flushed.wait_for(lambda: self._flush_done >= mine, timeout)

    def stop(self, timeout: float) -> bool:
        """Ask the thread to finish its round and exit; True if it did within `timeout`."""
        self.stopping = True
        self.wake.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- the loop --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            requested = self._flush_requested  # every event emitted before this request is in the queue now
            try:
                self._pump(len(self.queue))
                if self.wal is not None:
                    self.wal.sync_due()
                self._replay_spool(force=requested > self._flush_done)
                if requested > self._flush_done:
                    self.spool.sync()
            except SpoolError as e:  # closed under a sender that outlived close(): nothing left to do
                log.warning("telemetry client %r: %s", self.name, e)
            except Exception:  # noqa: BLE001 -- the sender must outlive a bug in a transport or serializer
                log.exception("telemetry client %r: sender error", self.name)
            if requested > self._flush_done:
                with self._flushed:
                    self._flush_done = requested
                    self._flushed.notify_all()
            if self.stopping and not self.queue:
                return
            self._wait()

    def take(self, n: int) -> list[Event]:
        batch = []
        for _ in range(n):
            try:
                batch.append(self.queue.popleft())
            except IndexError:
                break
        return batch

    def _pump(self, n: int) -> None:
        """Send (or spool) the next `n` queued events, in batches."""
        while n > 0:
            batch = self.take(min(n, self._batch_size))
            if not batch:
                return
            n -= len(batch)
            records = self.records(batch) if self.wal is None else [record for record, _ in batch]
            if not records:
                continue
            if self.spool.empty and (self._healthy or time.monotonic() >= self._next_retry) and self._send(records):
                self.counters.add("sent", len(records))
            else:
                self.to_spool(records)
            if self.wal is not None:
                self.wal.commit(batch[-1][1])  # acknowledged or on disk in the spool: retired from the log

    def records(self, events: Sequence[Event]) -> list[Record]:
        """The records to send for `events`; events that cannot be serialized or are too large are dropped."""
        records, redacted, dropped = [], 0, Counter()
        for event in events:
            try:
                record, n = prepare(event, privacy_mode=self.config.privacy_mode,
                                    redact_secrets=self.config.redact_secrets, stamp_received=self._stamp_received)
            except (ValueError, TypeError) as e:
                log.warning("telemetry client %r: dropping event %s that cannot be serialized: %s",
                            self.name, getattr(event, "event_id", "?"), e)
                dropped["invalid"] += 1
                continue
            if len(record.value) > MAX_WIRE_BYTES:
                dropped["too_large"] += 1
                continue
            records.append(record)
            redacted += n
        with self.counters.lock:
            self.counters.redacted += redacted
            self.counters.dropped.update(dropped)
        return records

    def _send(self, records: list[Record]) -> bool:
        try:
            self.transport.send(records)
        except Exception as e:  # noqa: BLE001 -- any failure keeps the batch (spooled); a non-TransportError is a bug
            if not isinstance(e, TransportError):
                log.exception("telemetry client %r: transport raised %s; treating it as a failed send",
                              self.name, type(e).__name__)
            elif self._healthy:
                log.warning("telemetry client %r: send failed, spooling to disk until it recovers: %s", self.name, e)
            self._healthy, self._next_retry = False, time.monotonic() + self.config.retry_interval_s
            return False
        if not self._healthy:
            log.info("telemetry client %r: transport recovered", self.name)
        self._healthy = True
        return True

    def to_spool(self, records: list[Record]) -> int:
        """Append to the spool (thread-safe); what does not fit is counted as dropped. Returns how many it took."""
        try:
            taken, reason = self.spool.append(records), "spool_full"
        except (SpoolError, OSError) as e:
            log.error("telemetry client %r: cannot write the spool: %s", self.name, e)
            taken, reason = 0, "spool_error"
        with self.counters.lock:
            self.counters.spooled += taken
            if taken < len(records):
                self.counters.dropped[reason] += len(records) - taken
        return taken

    def _replay_spool(self, force: bool) -> None:
        """Resend spooled records in order: one chunk when the retry is due, or (`force`, for flush) until the
        spool is empty, up to what it held when the replay started, or a send fails."""
        if self.spool.empty or (not force and not self._healthy and time.monotonic() < self._next_retry):
            return
        stop_at, last = self.spool.end(), None
        while True:
            records, pos = self.spool.read(self._batch_size)
            if not records and (self.spool.empty or pos == last):
                return
            last = pos
            if records and not self._send(records):
                return
            self.spool.commit(pos)  # without records: past a corrupt stretch the spool skipped
            self.counters.add("resent", len(records))
            if not force or pos >= stop_at or self.spool.empty:
                return

    def _wait(self) -> None:
        """Sleep until there is work: a full batch, `linger_ms` after the first queued event, a retry, a flush."""
        if self.stopping or self._flush_requested > self._flush_done:
            return
        q = self.queue
        spool_pending = not self.spool.empty
        if len(q) >= self._batch_size or (spool_pending and self._healthy):
            return
        if q:
            self.wake.wait(self._linger_s)
            self.wake.clear()
            return
        timeout = min(IDLE_WAIT_S, max(0.0, self._next_retry - time.monotonic())) if spool_pending else IDLE_WAIT_S
        self.idle = True
        if not q:  # checked after publishing `idle`: an emit in between either sees it or is seen here
            self.wake.wait(timeout)
        self.idle = False
        self.wake.clear()
        if q and len(q) < self._batch_size and not self.stopping and self._flush_requested <= self._flush_done:
            self.wake.wait(self._linger_s)  # the first event after a quiet spell: let a batch gather
            self.wake.clear()
