"""Durable file writes: write to a temporary name, fsync, rename into place, fsync the directory.

After `write_durably` returns, the file is on disk under its final name with its full content, or (if the process
died earlier) only a temporary file exists, which `is_temp` recognises so recovery can delete it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import BinaryIO, Callable

TEMP_PREFIX = ".tmp-"


def is_temp(path: Path) -> bool:
    return path.name.startswith(TEMP_PREFIX)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """mkdir -p, fsyncing the parent of every directory it creates so the new entries survive a crash."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue
        fsync_dir(d.parent)


def write_durably(path: Path, write: Callable[[BinaryIO], None]) -> int:
    """Create `path` atomically with what `write(f)` writes. Returns the size in bytes."""
    make_dirs(path.parent)
    tmp = path.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex[:8]}-{path.name}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return size


def write_bytes_durably(path: Path, data: bytes) -> int:
    return write_durably(path, lambda f: f.write(data))
