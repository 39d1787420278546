"""A bounded window of recently archived event_ids: drops a client's retry of an event already archived.

The window holds the newest `capacity` ids (insertion order; the oldest are forgotten first). It is rebuilt at
start-up from the newest manifested files, so a restart does not forget what was archived just before it.
Retries older than the window are not dropped here; `reader.read_events(dedupe=True)` removes them on read.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable


class RecentIds:
    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, event_id: str) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add_all(self, event_ids: Iterable[str]) -> None:
        if self.capacity == 0:
            return
        ids = self._ids
        for e in event_ids:
            ids[e] = None
            ids.move_to_end(e)
        while len(ids) > self.capacity:
            ids.popitem(last=False)
