"""Schema evolution.

The compatibility rule: a new version of an event type may only
  * add a field that has a default (older events read with the default), or
  * change a field through an upgrader registered here (a pure function from the old dict to the new one).
It may never drop or retype a field without an upgrader. Every version ever written has a fixture in
`schemas/fixtures/<event_type>/v<N>.json`; a test proves the current models read all of them.
"""

from __future__ import annotations

from typing import Any, Callable

Upgrader = Callable[[dict[str, Any]], dict[str, Any]]


def _trajectory_v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    # v1 had no sampling parameters; v1 servers sampled at temperature 1 from the untruncated distribution.
    return {**d, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "schema_version": 2}


UPGRADERS: dict[tuple[str, int], Upgrader] = {
    ("trajectory", 1): _trajectory_v1_to_v2,
}


def is_additive(event_type: str, version: int, current: int) -> bool:
    """No upgrader between `version` and `current`: every step only added fields with defaults, so a table written
    at `version` reads at `current` by filling those defaults column by column (`schemas.arrow.fill_defaults`),
    without taking each row through the model."""
    return 1 <= version <= current and all((event_type, v) not in UPGRADERS for v in range(version, current))


def upgrade(d: dict[str, Any], current: int) -> dict[str, Any]:
    """Apply upgraders until `d` is at `current`. Raises ValueError for a version newer than this code knows."""
    event_type = d.get("event_type")
    version = d.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return d  # validation reports the bad field
    if version < 1:
        raise ValueError(f"schema_version must be >= 1, got {version}")
    if version > current:
        raise ValueError(f"schema_version {version} is newer than this reader knows ({current})")
    while version < current:
        step = UPGRADERS.get((event_type, version))
        if step is None:  # additive change: defaults fill the new fields
            d = {**d, "schema_version": version + 1}
        else:
            d = step(d)
        version = d["schema_version"]
    return d
