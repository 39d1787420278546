"""The SDK's on-disk spool: records that could not be sent yet, kept in order across crashes and restarts.

Layout of `directory`:
    seg-000000000007.log   append-only segments of length-prefixed, CRC-checked records (topic, key, value):
                           `instrumentation.spool_format`
    cursor.json            {"segment": S, "offset": O}: everything before it was sent (written atomically)
    lock                   flock'd while a process has the spool open (one writer per directory)

Guarantees: records are replayed in the order they were appended; a record handed to `append` is in the OS page
cache when `append` returns (it survives a process crash) and on disk after every `fsync_every` records and on
`sync`/`close` (it survives a machine crash). Delivery is at-least-once: a crash between a send and `commit`
replays that chunk (downstream dedupes by event_id). A torn last record (crash mid-write) is truncated at open;
a corrupt record elsewhere ends its segment's replay and is counted. The spool never grows past `max_bytes` on
disk: `append` refuses what does not fit and says how many records it took. Fully sent segments are deleted.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

from instrumentation.spool_format import encode, read_record
from instrumentation.transport import Record

log = logging.getLogger(__name__)


class SpoolError(RuntimeError):
    pass


@dataclass(frozen=True, order=True)
class Position:
    segment: int
    offset: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    durable_cursor = True
    """`commit` fsyncs the cursor (and the directory): a machine crash does not resend what was committed."""
    fresh_segment_when_empty = True
    """A `commit` that empties the spool starts the next append in a new segment, so every byte is deleted."""

    def __init__(self, directory: str | Path, *, max_bytes: int, fsync_every: int = 200,
                 segment_bytes: int = 8 * 1024 * 1024):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes, self.fsync_every, self.segment_bytes = max_bytes, fsync_every, segment_bytes
        self._lock = threading.Lock()
        self._lockfile = open(self.dir / "lock", "a+b")
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lockfile.close()
            raise SpoolError(f"spool {self.dir} is open in another process or client; give each its own") from None
        self.truncated_bytes = 0
        self.corrupt_segments = 0
        self._writer: BinaryIO | None = None
        self._writer_index = -1
        self._unsynced = 0
        self._closed = False
        cursor = self._load_cursor()
        self._sizes: dict[int, int] = {}
        for path in sorted(self.dir.glob("seg-*.log")):
            index = int(path.stem[4:])
            if index < cursor.segment:
                path.unlink()  # sent before the last run ended; its deletion was interrupted
            else:
                self._sizes[index] = path.stat().st_size
        if self._sizes:
            self._repair(max(self._sizes))
        self._bytes = sum(self._sizes.values())  # kept current under the lock; read without it by stats()
        self._read = cursor if cursor.segment in self._sizes else Position(self._first_from(cursor.segment), 0)
        self._next_index = max([cursor.segment, *self._sizes]) + 1

    # -- paths and cursor ----------------------------------------------------------------------------------
    def _path(self, index: int) -> Path:
        return self.dir / f"seg-{index:012d}.log"

    def _load_cursor(self) -> Position:
        try:
            d = json.loads((self.dir / "cursor.json").read_text())
            return Position(int(d["segment"]), int(d["offset"]))
        except FileNotFoundError:
            return Position(0, 0)
        except (ValueError, KeyError, TypeError) as e:
            log.warning("spool %s: unreadable cursor (%s); replaying from the first segment", self.dir, e)
            return Position(0, 0)

    def _store_cursor(self, pos: Position) -> None:
        tmp = self.dir / "cursor.json.tmp"
        with open(tmp, "w") as f:
            json.dump({"segment": pos.segment, "offset": pos.offset}, f)
            if self.durable_cursor:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.dir / "cursor.json")
        if self.durable_cursor:
            _fsync_dir(self.dir)

    def _first_from(self, index: int) -> int:
        later = [i for i in self._sizes if i >= index]
        return min(later) if later else index

    def _repair(self, index: int) -> None:
        """Truncate a torn or corrupt tail of the last segment (a crash in the middle of a write)."""
        good = 0
        with open(self._path(index), "rb") as f:
            while True:
                record, size = read_record(f)
                if record is None:
                    break
                good += size
        if good < self._sizes[index]:
            log.warning("spool %s: truncating %d bytes of a torn record at the end of segment %d",
                        self.dir, self._sizes[index] - good, index)
            self.truncated_bytes += self._sizes[index] - good
            os.truncate(self._path(index), good)
            self._sizes[index] = good

    # -- writing -------------------------------------------------------------------------------------------
    def append(self, records: Sequence[Record]) -> int:
        """Append in order; returns how many were taken (the rest did not fit under `max_bytes`)."""
        with self._lock:
            self._check_open()
            taken = sum(self._write(encode(record)) for record in records)
            if self._writer is not None:
                self._writer.flush()  # into the page cache: survives a crash of this process
            return taken

    def _write(self, data: bytes) -> bool:
        """Under the lock: append one encoded record unless it would pass `max_bytes`; fsync per `fsync_every`."""
        if self._bytes + len(data) > self.max_bytes:
            return False
        writer = self._writer_with_room()
        writer.write(data)
        self._sizes[self._writer_index] += len(data)
        self._bytes += len(data)
        self._unsynced += 1
        if self._unsynced >= self.fsync_every:
            self._sync()
        return True

    def _writer_with_room(self) -> BinaryIO:
        if self._writer is not None and self._sizes[self._writer_index] >= self.segment_bytes:
            self._sync()
            self._writer.close()
            self._writer = None
        if self._writer is None:
            self._writer_index, self._next_index = self._next_index, self._next_index + 1
            self._writer = open(self._path(self._writer_index), "ab")
            self._sizes[self._writer_index] = 0
            self._sync_dir()
        return self._writer

    def _sync_dir(self) -> None:
        _fsync_dir(self.dir)

    def _sync(self) -> None:
        if self._writer is not None and self._unsynced:
            self._writer.flush()
            os.fsync(self._writer.fileno())
        self._unsynced = 0

    def sync(self) -> None:
        """Everything appended so far is on disk when this returns."""
        with self._lock:
            self._sync()

    # -- reading -------------------------------------------------------------------------------------------
    def read(self, max_records: int) -> tuple[list[Record], Position]:
        """Up to `max_records` records from the cursor on, in order, and the position after them (for `commit`).
        Reading does not move the cursor: until `commit`, the same records are read again."""
        with self._lock:
            self._check_open()
            out: list[Record] = []
            pos = self._read
            if pos.segment not in self._sizes:  # the cursor's segment is gone: start at the next one
                pos = Position(self._first_from(pos.segment), 0)
            while len(out) < max_records and pos.segment in self._sizes:
                size = self._sizes[pos.segment]
                if pos.offset >= size:
                    later = [i for i in self._sizes if i > pos.segment]
                    if not later:
                        break
                    pos = Position(min(later), 0)
                    continue
                if pos.segment == self._writer_index and self._writer is not None:
                    self._writer.flush()
                pos = self._read_segment(pos, size, max_records - len(out), out)
            return out, pos

    def _read_segment(self, pos: Position, size: int, limit: int, out: list[Record]) -> Position:
        offset = pos.offset
        with open(self._path(pos.segment), "rb") as f:
            f.seek(offset)
            while limit > 0 and offset < size:
                record, n = read_record(f)
                if record is None:
                    log.error("spool %s: corrupt record in segment %d at offset %d; skipping the rest of the "
                              "segment (%d bytes)", self.dir, pos.segment, offset, size - offset)
                    self.corrupt_segments += 1
                    return Position(pos.segment, size)
                out.append(record)
                offset += n
                limit -= 1
        return Position(pos.segment, offset)

    def commit(self, pos: Position) -> None:
        """Everything before `pos` was sent: persist the cursor, then delete fully sent segments."""
        with self._lock:
            self._check_open()
            self._read = pos
            if self.fresh_segment_when_empty and self._empty():
                pos = Position(self._next_index, 0)  # nothing left: start over with a fresh segment
                self._read = pos
            self._store_cursor(pos)
            for index in [i for i in self._sizes if i < pos.segment]:
                if index == self._writer_index and self._writer is not None:
                    self._writer.close()
                    self._writer, self._writer_index, self._unsynced = None, -1, 0
                self._path(index).unlink(missing_ok=True)
                self._bytes -= self._sizes.pop(index)

    def _check_open(self) -> None:
        if self._closed:  # another Spool may own the directory now
            raise SpoolError(f"spool {self.dir} is closed")

    # -- state ---------------------------------------------------------------------------------------------
    def _empty(self) -> bool:
        rest = [i for i in self._sizes if i >= self._read.segment]
        if not rest:
            return True
        return rest == [self._read.segment] and self._read.offset >= self._sizes[self._read.segment]

    @property
    def empty(self) -> bool:
        with self._lock:
            return self._empty()

    def end(self) -> Position:
        """The position after the last record appended so far."""
        with self._lock:
            if not self._sizes:
                return self._read
            last = max(self._sizes)
            return Position(last, self._sizes[last])

    @property
    def bytes(self) -> int:
        """Bytes on disk in segments (sent parts of the oldest segment included until it is deleted)."""
        return self._bytes

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._sync()
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            self._closed = True
            fcntl.flock(self._lockfile, fcntl.LOCK_UN)
            self._lockfile.close()
