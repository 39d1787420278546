"""Log files bounded by size: rotated in place, a few copies kept.

    rotate(Path("state/logs/serving.log"), max_bytes=64 * 2**20, keep=3)   # True when it rotated

The stack's processes write their output straight into their log file (`ManagedProcess`: the child holds the file
open in append mode), so a log is rotated by copy and truncate: its content is copied to `<name>.1` (older copies
move to `<name>.2` ... `<name>.<keep>`, the oldest is dropped), then the file is truncated in place. Its writers
keep their file descriptor and, appending, go on at the new end. Lines written between the copy and the truncation
are lost (a few at most). A writer that did not open the file for appending would leave a hole: every writer here
appends. Rotation happens when a process starts (`ManagedProcess.start`, with the defaults below) and, with the
configured bounds (`orchestrator.log_max_bytes`, `orchestrator.log_keep`), at every cadence tick and after every
cycle (infra.orchestrator.housekeeping).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

LOG_MAX_BYTES = 64 * 2**20     # the defaults of orchestrator.log_max_bytes and orchestrator.log_keep
LOG_KEEP = 3


def rotated(path: Path, i: int) -> Path:
    """The i-th rotated copy of `path`: `<name>.<i>` (1 is the newest)."""
    return path.with_name(f"{path.name}.{i}")


def copies(path: Path) -> list[Path]:
    """The rotated copies of `path` there are, newest first."""
    pattern = re.compile(re.escape(path.name) + r"\.(\d+)")
    found = [(int(m.group(1)), p) for p in path.parent.glob(f"{path.name}.*") if (m := pattern.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def rotate(path: Path, max_bytes: int, keep: int) -> bool:
    """When `path` holds more than `max_bytes`: copied to `<name>.1` (keeping `keep` copies; 0 keeps none) and
    truncated in place. Whether it rotated (False when it is missing or within the bound)."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    for old in copies(path):          # drop what the shift would push past `keep` (also after `keep` was lowered)
        if int(old.name.rsplit(".", 1)[1]) >= keep:
            old.unlink(missing_ok=True)
    for i in range(keep - 1, 0, -1):
        if rotated(path, i).exists():
            rotated(path, i).replace(rotated(path, i + 1))
    if keep:
        shutil.copyfile(path, rotated(path, 1))
    with open(path, "r+b") as f:
        f.truncate(0)
    return True


def rotate_all(folder: Path, max_bytes: int, keep: int, pattern: str = "*.log") -> list[str]:
    """`rotate` every file of `folder` (recursively) whose name matches `pattern`; the paths rotated, relative to
    `folder`."""
    if not folder.is_dir():
        return []
    return [str(p.relative_to(folder)) for p in sorted(folder.rglob(pattern))
            if p.is_file() and rotate(p, max_bytes, keep)]
