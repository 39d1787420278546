"""One archiver per archive root: recovery deletes files no manifest lists, which would destroy a second,
concurrent archiver's batch in flight (or an import's).

* A local root: an flock on `<root>/_archiver.lock`, so a killed archiver never leaves it held.
* An object-store root (`s3://...`): a lease, the object `<root>/_archiver.lock` holding its owner and expiry,
  created with a conditional PUT (`If-None-Match: *`: only one writer can create it) and renewed with
  `If-Match: <etag>` (only its holder can extend it). The holder renews it every `ttl_s / 3` (`renew`, called by
  the archiver's loop and the import); a holder that stops renewing (killed) loses it `ttl_s` after its last
  renewal, and the next archiver takes it over with another `If-Match`. Limits, stated plainly:
    - expiry compares wall clocks of different hosts: keep them in sync (NTP) well within `ttl_s`;
    - there is no fencing token: a holder paused for longer than `ttl_s` (a stopped VM) and then resumed could
      write one more batch before its next `renew` fails and stops it;
    - it needs a server that honours conditional writes (AWS S3 since 2024, MinIO, moto). `acquire` checks once
      per root and refuses to run on a server that ignores them, rather than run unprotected.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Callable

from pipelines.archive import layout
from pipelines.archive.manifest import ArchiveError
from schemas import storage

LEASE_TTL_S = 30.0


class FileLock:
    """The flock of a local root."""

    def __init__(self, root: Path):
        self.path = Path(root) / layout.LOCK_FILE
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

    def renew(self) -> None:
        pass  # an flock lasts as long as its process

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def holder(root: Path) -> int | None:
        try:
            return int((Path(root) / layout.LOCK_FILE).read_text().strip())
        except (OSError, ValueError):
            return None


_CONDITIONAL_OK: set[str] = set()   # roots (with their endpoint) seen honouring If-None-Match


def _check_conditional_writes(root: Path | str) -> None:
    key = f"{storage.S3Settings.from_env().endpoint_url}|{root}"
    if key in _CONDITIONAL_OK:
        return
    probe = storage.join(root, f"{layout.LOCK_FILE}.probe-{uuid.uuid4().hex[:12]}")
    try:
        first, second = storage.create_if_absent(probe, b"1"), storage.create_if_absent(probe, b"2")
    finally:
        storage.delete(probe)
    if first is None or second is not None:
        raise ArchiveError(f"the object store of {root} does not honour conditional writes (If-None-Match: *): "
                           "the archive's single-writer lease cannot be enforced there; use a server that does "
                           "(AWS S3, MinIO, moto) or a local root")
    _CONDITIONAL_OK.add(key)


class S3Lease:
    """The lease of an object-store root (see the module docstring). Two clocks, injectable for tests: `wall_clock`
    stamps the expiry written in the lease and compares another holder's with it (hosts share wall-clock time, not
    monotonic time); `clock` (monotonic) paces this holder's renewals."""

    def __init__(self, root: Path | str, ttl_s: float = LEASE_TTL_S, *,
                 wall_clock: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic):
        self.root = root
        self.path = storage.join(root, layout.LOCK_FILE)
        self.ttl_s = ttl_s
        self.owner = uuid.uuid4().hex
        self.wall_clock, self.clock = wall_clock, clock
        self._version: str | None = None
        self._renewed_at = 0.0

    def _body(self) -> bytes:
        now = self.wall_clock()
        return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "owner": self.owner,
                           "renewed_at": now, "expires_at": now + self.ttl_s, "ttl_s": self.ttl_s}).encode()

    @staticmethod
    def _parse(data: bytes) -> dict:
        try:
            d = json.loads(data)
            return d if isinstance(d, dict) else {}
        except ValueError:
            return {}

    def acquire(self) -> None:
        _check_conditional_writes(self.root)
        for _ in range(3):
            version = storage.create_if_absent(self.path, self._body())
            if version is None:
                current = storage.read_versioned(self.path)
                if current is None:
                    continue  # released between our two requests: try creating it again
                data, etag = current
                held = self._parse(data)
                expires = held.get("expires_at")
                now = self.wall_clock()
                if isinstance(expires, (int, float)) and expires > now:
                    raise ArchiveError(
                        f"another archiver (pid {held.get('pid', '?')} on {held.get('host', '?')}) holds the lease "
                        f"{self.path} for {expires - now:.0f}s more (it expires {self.ttl_s:g}s after its "
                        "holder stops renewing it)")
                version = storage.replace_if_version(self.path, self._body(), etag)  # take over an expired lease
                if version is None:
                    continue  # someone else renewed or took it meanwhile: look again
            self._version = version
            self._renewed_at = self.clock()
            return
        raise ArchiveError(f"could not take the lease {self.path}: other writers keep changing it")

    def renew(self, force: bool = False) -> None:
        """Extend the lease (at most every ttl_s / 3 unless `force`). Raises ArchiveError when it was lost."""
        if self._version is None or (not force and self.clock() - self._renewed_at < self.ttl_s / 3):
            return
        version = storage.replace_if_version(self.path, self._body(), self._version)
        if version is None:
            self._version = None
            raise ArchiveError(f"lost the lease {self.path}: another archiver took it over (this one did not "
                               f"renew it within {self.ttl_s:g}s); stopping without committing")
        self._version = version
        self._renewed_at = self.clock()

    def release(self) -> None:
        if self._version is not None:
            storage.delete_if_version(self.path, self._version)
            self._version = None

    @staticmethod
    def holder(root: Path | str) -> int | None:
        current = storage.read_versioned(storage.join(root, layout.LOCK_FILE))
        pid = S3Lease._parse(current[0]).get("pid") if current else None
        return pid if isinstance(pid, int) else None


class RootLock:
    """The single-writer lock of an archive root: `FileLock` for a local root, `S3Lease` in an object store."""

    def __init__(self, root: Path | str):
        root = storage.normalize(root)
        self._impl = FileLock(root) if isinstance(root, Path) else S3Lease(root)
        self.path = self._impl.path

    def acquire(self) -> None:
        self._impl.acquire()

    def renew(self) -> None:
        """Keep holding it (a lease is extended; an flock needs nothing). Raises ArchiveError when it was lost."""
        self._impl.renew()

    def release(self) -> None:
        self._impl.release()

    @staticmethod
    def holder(root: Path | str) -> int | None:
        """The pid written by the archiver holding (or last holding) the lock on `root`."""
        root = storage.normalize(root)
        return FileLock.holder(root) if isinstance(root, Path) else S3Lease.holder(root)
