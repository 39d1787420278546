"""A bounded window of recently archived events, by tenant key (org_id, event_id): drops a client's retry of an
event already archived. Event ids are chosen by clients, so an id is unique only within its org: another org's event
with the same id is a different event (keyed by id alone, one org could suppress another's event).

The window holds the newest `capacity` ids (insertion order; the oldest are forgotten first). It is rebuilt at
start-up from the newest manifested files, so a restart does not forget what was archived just before it.
Retries older than the window are not dropped here; `reader.read_events(dedupe=True)` removes them on read.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable


def tenant_key(event) -> tuple[str, str]:
    """What identifies an event across orgs: (org_id, event_id)."""
    return (event.org_id, event.event_id)


class RecentIds:
    def __init__(self, capacity: int):
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        self._ids: OrderedDict[tuple[str, str], None] = OrderedDict()

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add_all(self, keys: Iterable[tuple[str, str]]) -> None:
        if self.capacity == 0:
            return
        ids = self._ids
        for e in keys:
            ids[e] = None
            ids.move_to_end(e)
        while len(ids) > self.capacity:
            ids.popitem(last=False)
