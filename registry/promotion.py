"""Move the registry alias `champion` to a gated candidate, by compare-and-swap, with an audit trail; roll back.

`promote(registry, version, lock)` succeeds only if
  - the version's gate tags (evals/gate/tracking.py) say `gate.decision = promote` (`force` skips this check and
    is recorded), and
  - alias `champion` still points to `gate.champion_version`, the version the candidate was evaluated against.
    A champion that moved since the eval (another candidate promoted, a rollback) makes the comparison stale:
    the candidate must be gated again against the new champion. `force` never skips this check.
Then the old champion becomes alias `previous` and the version gets `promotion.*` audit tags. `rollback` makes
`previous` the champion again and walks `previous` one promotion further back (each version's
`promotion.previous_version`), so repeated rollbacks undo promotions in order.

**Lock assumption.** MLflow's alias API has no compare-and-swap, so the read-check-write runs under an exclusive
`fcntl.flock` on a lock file next to the SQLite store (or under the state dir for another tracking URI). That is
atomic for every promoter on the machine holding the embedded store (the default). With a shared MLflow server,
promoters on different machines do not see each other's flock: promote from one place (the orchestrator), or
put a server-side lock in front of this module.
"""

from __future__ import annotations

import fcntl
import getpass
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

CHAMPION, PREVIOUS = "champion", "previous"


class PromotionRefused(Exception):
    """The promotion or rollback was not done; the message says why and what to do."""


@dataclass
class PromotionResult:
    action: str                   # "promote" | "rollback"
    champion: str                 # the version `champion` points to now
    previous: str | None          # the version `previous` points to now (None: unset)
    replaced: str | None          # the version `champion` pointed to before
    forced: bool = False
    eval_run: str = ""
    decision: str = ""
    interval: str = ""
    time: str = ""
    by: str = ""


def lock_path_for(tracking_uri: str, state_path: Path) -> Path:
    """`<db>.promotion.lock` next to a SQLite store, else `<state_dir>/registry.promotion.lock`."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///"):] + ".promotion.lock")
    return Path(state_path) / "registry.promotion.lock"


@contextmanager
def registry_lock(path: str | Path, timeout_s: float = 60.0) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created) for the block; PromotionRefused after `timeout_s`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PromotionRefused(f"another promotion holds {path} for more than {timeout_s:.0f} s") from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _now(now: datetime | None) -> str:
    return (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")


def _tags(registry, version: str) -> dict[str, str]:
    from mlflow.exceptions import MlflowException

    try:
        return registry.info(version).tags
    except MlflowException:
        raise PromotionRefused(f"version {version} of model {registry.model!r} does not exist") from None


def promote(registry, version: str, lock: str | Path, force: bool = False, expect_champion: str | None = None,
            now: datetime | None = None) -> PromotionResult:
    """Make `version` the champion if its gate passed against the current champion (see the module docstring).
    `expect_champion` names the champion to swap from when the version has no `gate.champion_version` (only
    useful with `force`); it must agree with the tag when both exist."""
    version = str(version)
    with registry_lock(lock):
        tags = _tags(registry, version)
        decision, gated_against = tags.get("gate.decision"), tags.get("gate.champion_version")
        if not force and decision != "promote":
            why = ("has no gate result (run the gate first)" if decision is None else
                   f"was not passed by its gate: {decision} ({tags.get('gate.reasons') or 'no reason recorded'}), "
                   f"run {tags.get('gate.run_id', '?')}")
            raise PromotionRefused(f"version {version} {why}; --force promotes anyway (audited)")
        if expect_champion is not None and gated_against is not None and str(expect_champion) != gated_against:
            raise PromotionRefused(f"version {version} was gated against champion {gated_against}, "
                                   f"not {expect_champion}")
        expected = gated_against if gated_against is not None else expect_champion
        if expected is None:
            raise PromotionRefused(f"version {version} records no champion it was compared against: pass "
                                   "--expect-champion VERSION (the compare-and-swap needs one)")
        current = registry.version_of(CHAMPION)
        if current == version:
            raise PromotionRefused(f"version {version} is already the champion")
        if current != str(expected):
            raise PromotionRefused(f"alias champion moved since the eval: it points to {current}, and version "
                                   f"{version} was compared against {expected}; gate it again against {current}")
        if current is not None:
            registry.set_alias(PREVIOUS, current)
        registry.set_alias(CHAMPION, version)
        result = PromotionResult("promote", version, current, current, force, tags.get("gate.run_id", ""),
                                 decision or "", tags.get("gate.interval", ""), _now(now), _actor())
        registry.set_version_tags(version, {
            "promotion.time": result.time, "promotion.previous_version": current or "",
            "promotion.eval_run": result.eval_run, "promotion.decision": result.decision or "none",
            "promotion.interval": result.interval, "promotion.forced": str(force).lower(),
            "promotion.by": result.by})
    return result


def rollback(registry, lock: str | Path, now: datetime | None = None) -> PromotionResult:
    """Point `champion` back at `previous`; `previous` moves to the version that one replaced (or is removed)."""
    with registry_lock(lock):
        current, prev = registry.version_of(CHAMPION), registry.version_of(PREVIOUS)
        if prev is None:
            raise PromotionRefused("alias previous is not set: there is no promotion to roll back")
        if prev == current:
            raise PromotionRefused(f"alias previous already equals champion ({current})")
        before = _tags(registry, prev).get("promotion.previous_version") or None
        registry.set_alias(CHAMPION, prev)
        if before is not None and before != prev:
            registry.set_alias(PREVIOUS, before)
        else:
            registry.delete_alias(PREVIOUS)
        result = PromotionResult("rollback", prev, before if before != prev else None, current,
                                 time=_now(now), by=_actor())
        if current is not None:
            registry.set_version_tags(current, {"rollback.time": result.time, "rollback.restored_version": prev,
                                                "rollback.by": result.by})
        registry.set_version_tags(prev, {"restored.time": result.time, "restored.replaced_version": current or "",
                                         "restored.by": result.by})
    return result
