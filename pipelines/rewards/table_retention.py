"""Age retention of the reward table (`rewards.retention_s`): which windows go, decided from the cuts the cycles
recorded (pure: `reads_from`, `expired_windows`), and their deletion (`table_windows`, `delete_windows`).

The table is partitioned `policy_version=<v>/window=<label>/` (pipelines/rewards/sink.py), and its task-outcome
table `_outcomes/` beside it the same way. A bounded run's label is its cycle id; a streaming run's is the hour of
its rows' mature time (`%Y%m%dT%H%M%SZ`). A window goes whole: every version's partition of it, rows and outcome
rows.

Who reads which windows:
  * a cycle's steps (validate, measure, train, the orgs' trains) read the cycle's own window;
  * its training looks up chain rows (trainer/outcomes.py): the reward rows, from earlier windows, of the requests
    its outcome rows decide. An outcome row of cycle C matured after C's `after` (the cut before it) and its
    request lies at most `RewardSpec.outcome_keep_s()` before its maturity; the request's reward row was emitted
    by a window whose cut (`as_of`) is at or after the row's maturity, itself after the request. So C reads no
    window whose cut lies more than outcome_keep_s before C's `after`;
  * the demo's summaries read the measured cycles' windows (a window retention removed is left out);
  * `rtrl replay` reads the archive and writes a table of its own, never this one.

The rule. `reads_from` is the earliest cut a cycle still to train reads back from: the `after` of each cycle not
finished (unknown: the newest finished cut before its own), and the newest finished cut (the next cycle's
`after`). A finished cycle's window whose cut lies `retention_s` or more before it is expired. RewardSpec holds
`retention_s >= outcome_keep_s`, so no cycle still to train needs an expired window, and the newest finished
window never expires. A window of an unfinished cycle or of unknown cut (a window run by hand) is kept, and so is
everything while no cycle has finished. The clock is the cycles' event time, not the wall clock: a loop that stops
deletes nothing more, and the demo's simulated clock ages the table as its cycles advance.

    windows = [WindowInfo("c7", as_of=..., after=..., finished=True), ...]
    gone = delete_windows(table, table_windows(table), expired_windows(windows, spec.retention_s))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from schemas import storage
from schemas.reward_table import OUTCOMES_DIR
from schemas.storage import Location

HOUR_LABEL = "%Y%m%dT%H%M%SZ"       # a streaming run's window: the hour of its rows' mature time


@dataclass(frozen=True)
class WindowInfo:
    label: str
    as_of: datetime | None          # the cut: rows maturing by then were emitted by this window (None: unknown)
    after: datetime | None          # rows maturing by then were emitted by earlier windows (None: unknown)
    finished: bool                  # its cycle ended (done or blocked): it trains no more


def hour_window(label: str) -> WindowInfo | None:
    """A streaming run's window (its label an hour), cut at the hour's end; None for any other label."""
    try:
        start = datetime.strptime(label, HOUR_LABEL).replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return WindowInfo(label, start + timedelta(hours=1), start, True)


def reads_from(windows: Iterable[WindowInfo]) -> datetime | None:
    """The earliest cut a cycle still to train reads back from (see the module docstring); None while no cycle with
    a known cut has finished, or when an unfinished cycle's reach is unknown (nothing expires then)."""
    windows = list(windows)
    done = sorted(w.as_of for w in windows if w.finished and w.as_of is not None)
    if not done:
        return None
    points = [done[-1]]
    for w in windows:
        if w.finished:
            continue
        if w.after is not None:
            points.append(w.after)
            continue
        before = [t for t in done if w.as_of is None or t < w.as_of]
        if not before:
            return None
        points.append(before[-1])
    return min(points)


def expired_windows(windows: Iterable[WindowInfo], retention_s: float) -> list[str]:
    """The labels of the windows retention deletes (see the module docstring), sorted. `retention_s` 0 keeps every
    one."""
    windows = list(windows)
    start = reads_from(windows)
    if retention_s <= 0 or start is None:
        return []
    cutoff = start - timedelta(seconds=retention_s)
    return sorted(w.label for w in windows if w.finished and w.as_of is not None and w.as_of <= cutoff)


def table_windows(table: Location) -> dict[str, list[Location]]:
    """Label -> the partition folders of that window in the reward table `table` and its task-outcome table."""
    out: dict[str, list[Location]] = {}
    for root in (storage.normalize(table), storage.join(table, OUTCOMES_DIR)):
        for version in storage.list_dirs(root):
            if not version.startswith("policy_version="):
                continue
            for window in storage.list_dirs(storage.join(root, version)):
                if window.startswith("window="):
                    out.setdefault(window.removeprefix("window="), []).append(storage.join(root, version, window))
    return out


def delete_windows(table: Location, partitions: Mapping[str, list[Location]], labels: Iterable[str]) -> list[str]:
    """Delete every partition of the windows `labels` (`partitions`: `table_windows(table)`), then the version
    folders they leave empty (local; an object store has no folders); the labels deleted."""
    gone = []
    for label in labels:
        for d in partitions.get(label, []):
            storage.delete_tree(d)
        gone.append(label)
    for root in (storage.local_path(storage.normalize(table)), storage.local_path(storage.join(table, OUTCOMES_DIR))):
        if root is None or not root.is_dir():
            continue
        for version in root.glob("policy_version=*"):
            if version.is_dir() and not any(version.iterdir()):
                version.rmdir()
    return gone
