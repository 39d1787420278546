"""Write-ahead mode of the SDK (`sdk.write_ahead`): an event is on disk when `emit` returns, so a kill of the
emitting process right after it (SIGKILL, OOM kill) does not lose it.

Why: without it `emit` only appends to the in-memory queue and the sender sends up to `linger_ms` later. Serving
answers a request right after emitting its trajectory, so a SIGKILL of serving lost the trajectories of requests
its clients already had answers for (such a request is a lost reward).

How (`<spool_dir>/wal/`, beside the spool's own segments):
- `emit` prepares the record on the caller's thread (privacy mode, redaction, serialization: what the sender
  does otherwise, `instrumentation.prepare`) and appends it to the log, then queues it with its log position.
  The append is one write() into the page cache, which outlives the process. Like the spool, the log is
  fsync'd every `spool_fsync_every` records (only a machine crash can lose the records since the last fsync), but
  by the sender's thread (`sync_due`, on a duplicated descriptor, outside the log's lock): an fsync took up to
  hundreds of milliseconds on a loaded machine here, too long to stall a request for.
  The log's order is the queue's order (one lock around both), so the sender meets records in log order.
- The log is a `Spool` in its own directory: the same segment files and record format
  (`instrumentation.spool_format`), torn-tail repair at open, one writer per directory. No second format.
- Retirement: when a batch taken off the queue was acknowledged by the transport, or written to the spool (as
  durable as the log) because sending failed, the sender commits the log's cursor past the batch's last record.
  Two things differ from the spool, both to keep fsync off every batch: the cursor is replaced atomically but
  not fsync'd (`durable_cursor`), and an emptied log goes on writing its current segment instead of opening a new
  file (`fresh_segment_when_empty`). Segments wholly behind the cursor are deleted, so the log holds at most about
  one segment (`spool_segment_bytes`) of retired records beside the unretired ones.
- Recovery: a client whose log holds unretired records (left by a killed process) appends them to its spool
  behind what the spool holds, fsyncs the spool, then retires them in the log -- before its sender starts. The
  spool's replay then sends them first, in order. A client with `write_ahead` off still recovers a log it finds.
- What a restart resends: exactly the unretired records, i.e. those still queued or in a batch whose send had not
  returned when the process died, plus at most the one batch acknowledged just before the death whose commit had
  not happened yet (after a machine crash: everything after the last cursor that reached the disk). Copies carry
  the same `event_id`; the reward job keeps the first and counts the others (`pipelines/rewards/bounded.py` for
  cycles and replays, `AssembleRewardsFn` in streaming; a copy that arrives after the cut-off is counted late).
  The archiver drops the retries it still remembers (`pipelines/archive/dedupe.py`) and records each dropped
  copy's id and position (`_duplicates/`).
- Events evicted under `queue_full_policy = "drop_oldest"` stay in the log until a later batch retires them: a
  process killed before that delivers them after all (at least once beats a counted drop). When the log is full
  (`spool_max_bytes`) or cannot be written, `emit` writes the event to the spool instead, as queue overflow does.
- Cost: the caller's thread does the preparing and one write() per event. `rtrl bench emit --json` on this
  project's 2-core machine (beside a running demo): emit p50 39 us / p99 105 us, without the log 1.7 / 2.2 us
  (edit and follow-up events); 45 / 170 us for serving's trajectories (192 tokens); events through to the
  transport 25,700/s instead of 46,600/s. Cheap for serving (tens of requests a second), not free: other clients
  keep the default (off).
"""

from __future__ import annotations

import os
from pathlib import Path

from instrumentation.config import SdkConfig
from instrumentation.spool import Position, Spool
from instrumentation.spool_format import encode
from instrumentation.transport import Record

WAL_DIR = "wal"


class WriteAheadLog(Spool):
    durable_cursor = False
    fresh_segment_when_empty = False

    def __init__(self, directory: str | Path, **kw):
        self._due: dict[int, int] = {}  # segment (-1: the directory) -> a duplicated descriptor to fsync
        super().__init__(directory, **kw)

    @classmethod
    def under(cls, spool_dir: str | Path, config: SdkConfig) -> "WriteAheadLog":
        return cls(Path(spool_dir) / WAL_DIR, max_bytes=config.spool_max_bytes, fsync_every=config.spool_fsync_every,
                   segment_bytes=config.spool_segment_bytes)

    def log(self, record: Record) -> Position | None:
        """Append `record`; the position after it (to `commit` once it is delivered), or None if it does not fit."""
        with self._lock:
            self._check_open()
            if not self._write(encode(record)):
                return None
            self._writer.flush()
            return Position(self._writer_index, self._sizes[self._writer_index])

    def _sync(self) -> None:
        """Under the lock: the fsync that `fsync_every` records or a segment switch ask for is left to `sync_due`
        (the sender's thread), so `log` never waits for the disk."""
        if self._writer is not None and self._unsynced:
            self._writer.flush()
            if self._writer_index not in self._due:  # a segment switch may close the writer before the fsync
                self._due[self._writer_index] = os.dup(self._writer.fileno())
        self._unsynced = 0

    def _sync_dir(self) -> None:
        if -1 not in self._due:
            self._due[-1] = os.open(self.dir, os.O_RDONLY)

    def sync_due(self) -> None:
        """fsync what `log` left to sync, without holding the log's lock (the sender calls this every round)."""
        with self._lock:
            due, self._due = self._due, {}
        for fd in due.values():
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def sync(self) -> None:
        super().sync()
        self.sync_due()

    def close(self) -> None:
        super().close()
        self.sync_due()

    def move_to(self, spool: Spool, chunk: int) -> tuple[int, int]:
        """Append every unretired record to `spool` (fsync'd), retiring them here. Returns (moved, refused): the
        records the spool took, and those it refused for want of room."""
        moved = refused = 0
        last = None
        while True:
            records, pos = self.read(chunk)
            if not records and (self.empty or pos == last):
                return moved, refused
            last = pos
            if records:
                taken = spool.append(records)
                moved, refused = moved + taken, refused + len(records) - taken
                spool.sync()
            self.commit(pos)  # without records: past a corrupt stretch that the log skipped
