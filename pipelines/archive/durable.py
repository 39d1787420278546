"""Durable file writes: what the archive's commit protocol needs of `schemas.storage`, under the names it has
always used.

After `write_durably` returns, the file is under its final name with its full content. Locally: temp name, fsync,
rename, fsync dir; if the process died earlier only a temporary file exists, which `is_temp` recognises so
recovery can delete it. In an object store (S3): the object appears whole at its upload's completion, or not at
all (see `schemas.storage`).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Callable

from schemas import storage
from schemas.storage import TEMP_PREFIX, fsync_dir  # noqa: F401  (re-exported)


def is_temp(path: Path | str) -> bool:
    return storage.is_temp(path)


def make_dirs(path: Path | str) -> None:
    """mkdir -p, fsyncing the parent of every directory it creates so the new entries survive a crash (a no-op
    in an object store)."""
    storage.mkdirs(path)


def write_durably(path: Path | str, write: Callable[[BinaryIO], None]) -> int:
    """Create `path` atomically with what `write(f)` writes. Returns the size in bytes."""
    return storage.write_atomic(path, write)


def write_bytes_durably(path: Path | str, data: bytes) -> int:
    return storage.write_bytes(path, data)
