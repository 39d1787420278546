"""One archiver per archive root: recovery deletes files no manifest lists, which would destroy a second,
concurrent archiver's batch in flight. The lock is an flock, so a killed archiver never leaves it held."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from pipelines.archive import layout
from pipelines.archive.manifest import ArchiveError


class RootLock:
    def __init__(self, root: Path):
        self.path = root / layout.LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ArchiveError(f"another archiver (pid {holder}) is writing to {self.path.parent}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def holder(root: Path) -> int | None:
        """The pid written by the archiver holding (or last holding) the lock on `root`."""
        try:
            return int((root / layout.LOCK_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
