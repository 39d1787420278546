"""Live progress of a reward job running in this process (the DirectRunner): steps add to named counts while
they run, the CLI draws them. Beam's metrics of a batch run are only readable once it has finished; these are
readable during it. On a distributed runner the counts stay in the workers, and the CLI shows its phases only.

Names: `events_total` (what the run will read, when known), `events_read`, `rows_emitted`.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_counts: dict[str, int] = {}


def add(name: str, n: int = 1) -> None:
    with _lock:
        _counts[name] = _counts.get(name, 0) + n


def put(name: str, value: int) -> None:
    with _lock:
        _counts[name] = value


def snapshot() -> dict[str, int]:
    with _lock:
        return dict(_counts)


def reset() -> None:
    with _lock:
        _counts.clear()
