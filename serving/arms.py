"""A/B arms → registry aliases → engines, and hot swaps when an alias moves (DESIGN.md §6, §7).

Every arm serves the version its alias (`serving.arms[i].alias`) points to; arms whose aliases point to the same
version share one engine. A poller reads the aliases every `registry_poll_s`. When one moves (promotion moved
`champion`, a rollback moved it back), the swap is blue/green:

  1. load the new version's engine beside the old one (in a thread: the event loop keeps serving on the old);
  2. switch the alias to it — one assignment in the event loop, so a request sees either the old engine or the
     new one, never neither;
  3. the old engine, once no arm uses it, finishes the requests it already holds (each request leases its engine
     for its whole life, so nothing is cut off), then shuts down (at most `drain_timeout_s` later).

Nothing fails or waits during a swap; `swaps` records how long each took (`load_s`: alias seen moved → new engine
serving; `drain_s`: old engine's last request finished). A version that fails to load is logged, the arm keeps
its old engine, and the load is retried after `RETRY_FAILED_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from serving.config import ServingConfig

log = logging.getLogger("rtrl.serving.arms")

RETRY_FAILED_S = 60.0


async def _shut_down(engine) -> None:
    """`engine.aclose()` when it has one (VllmEngine), else its blocking `shutdown()` in a thread."""
    if hasattr(engine, "aclose"):
        await engine.aclose()
    else:
        await asyncio.to_thread(engine.shutdown)


@dataclass(eq=False)
class Loaded:
    """One engine and the version it serves; `in_flight` counts the requests that hold it."""

    version: str
    engine: Any
    in_flight: int = 0
    retiring: bool = False


@dataclass
class SwapRecord:
    alias: str
    arms: list[str]
    from_version: str
    to_version: str
    at: str                      # wall-clock time the switch happened (UTC ISO)
    load_s: float                # alias seen moved -> new engine serving (0 when the version was already loaded)
    drain_s: float | None = None  # switch -> old engine's last in-flight request done (None: still draining)
    in_flight_at_switch: int = 0
    old_engine_shut_down: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Fleet:
    """Arms' engines. `loader(version, folder)` builds an engine (blocking; run in a thread); `registry` has
    `version_of(alias)` and `local_path(version)` (infra.registry.Registry)."""

    cfg: ServingConfig
    registry: Any
    loader: Callable[[str, Path], Any]
    swaps: list[SwapRecord] = field(default_factory=list)
    ready: bool = False
    last_error: str = ""

    def __post_init__(self):
        self.arm_alias = {a.name: a.alias for a in self.cfg.arms}
        self._by_alias: dict[str, Loaded] = {}
        self._loaded: dict[str, Loaded] = {}      # serving (not retiring) engines by version
        self._failed: dict[str, float] = {}       # version -> monotonic time its load failed
        self._draining: list[Loaded] = []         # retired engines finishing their requests
        self._tasks: set[asyncio.Task] = set()
        self._poller: asyncio.Task | None = None
        self._swap_lock = asyncio.Lock()

    # -- start / stop -------------------------------------------------------------------------------------------

    @property
    def aliases(self) -> list[str]:
        return list(dict.fromkeys(self.arm_alias.values()))

    async def start(self) -> None:
        """Resolve every alias and load its engine (one per distinct version). LookupError when one is unset."""
        for alias in self.aliases:
            version = await asyncio.to_thread(self.registry.version_of, alias)
            if version is None:
                raise LookupError(f"registry alias {alias!r} is not set (run `rtrl bootstrap` to make and register "
                                  "the default policy, or point the alias at a version)")
            self._by_alias[alias] = await self._get_or_load(version)
        self.ready = True

    def start_polling(self) -> None:
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll_forever(), name="rtrl-alias-poller")

    async def close(self) -> None:
        """Stop polling, let draining engines finish, shut every engine down."""
        if self._poller is not None:
            self._poller.cancel()
            try:
                await self._poller
            except asyncio.CancelledError:
                pass
            self._poller = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for slot in list(self._loaded.values()):
            await _shut_down(slot.engine)
        self._loaded.clear()
        self._by_alias.clear()
        self.ready = False

    # -- serving ------------------------------------------------------------------------------------------------

    @contextmanager
    def lease(self, arm: str) -> Iterator[Loaded]:
        """The arm's current engine, held for the request's whole life (a swap waits for it to be released)."""
        slot = self._by_alias[self.arm_alias[arm]]
        slot.in_flight += 1
        try:
            yield slot
        finally:
            slot.in_flight -= 1

    def arm_versions(self) -> dict[str, str]:
        return {arm: self._by_alias[alias].version for arm, alias in self.arm_alias.items() if alias in self._by_alias}

    def status(self) -> dict:
        return {"ready": self.ready,
                "arms": {arm: {"alias": alias, "version": self._by_alias[alias].version if alias in self._by_alias
                               else None} for arm, alias in self.arm_alias.items()},
                "engines": [{"version": s.version, "in_flight": s.in_flight, "retiring": s.retiring}
                            for s in self._all_slots()],
                "swaps": [s.as_dict() for s in self.swaps[-20:]], "last_error": self.last_error}

    def _all_slots(self) -> list[Loaded]:
        return [*self._loaded.values(), *self._draining]

    # -- hot swap -----------------------------------------------------------------------------------------------

    async def _get_or_load(self, version: str) -> Loaded:
        if (slot := self._loaded.get(version)) is not None:
            return slot
        folder = await asyncio.to_thread(self.registry.local_path, version)
        engine = await asyncio.to_thread(self.loader, version, folder)
        slot = self._loaded[version] = Loaded(version, engine)
        return slot

    async def poll_once(self) -> list[SwapRecord]:
        """Check every alias once; swap those that moved. Returns the swaps made."""
        done = []
        async with self._swap_lock:
            for alias in self.aliases:
                try:
                    version = await asyncio.to_thread(self.registry.version_of, alias)
                except Exception as e:  # noqa: BLE001 -- a registry hiccup must not stop serving or polling
                    self.last_error = f"reading alias {alias!r}: {type(e).__name__}: {e}"
                    log.warning("%s", self.last_error)
                    continue
                current = self._by_alias.get(alias)
                if version is None or current is None or version == current.version:
                    continue
                failed_at = self._failed.get(version)
                if failed_at is not None and time.monotonic() - failed_at < RETRY_FAILED_S:
                    continue
                rec = await self._swap(alias, current, version)
                if rec is not None:
                    done.append(rec)
        return done

    async def _swap(self, alias: str, current: Loaded, version: str) -> SwapRecord | None:
        t0 = time.monotonic()
        log.info("alias %r moved %s -> %s: loading the new engine beside the old one", alias, current.version,
                 version)
        try:
            new = await self._get_or_load(version)
        except Exception as e:  # noqa: BLE001 -- keep serving the old version; retry later
            self._failed[version] = time.monotonic()
            self.last_error = f"loading version {version} for alias {alias!r}: {type(e).__name__}: {e}"
            log.error("%s; still serving version %s", self.last_error, current.version)
            return None
        self._failed.pop(version, None)
        self._by_alias[alias] = new  # the switch: new requests now lease `new`
        arms = [a for a, al in self.arm_alias.items() if al == alias]
        rec = SwapRecord(alias=alias, arms=arms, from_version=current.version, to_version=version,
                         at=datetime.now(timezone.utc).isoformat(), load_s=round(time.monotonic() - t0, 3),
                         in_flight_at_switch=current.in_flight)
        self.swaps.append(rec)
        log.info("alias %r now serves version %s (arms %s); swap took %.1fs; %d requests still on version %s",
                 alias, version, ", ".join(arms), rec.load_s, current.in_flight, current.version)
        if current not in self._by_alias.values():
            self._retire(current, rec)
        return rec

    def _retire(self, slot: Loaded, rec: SwapRecord) -> None:
        if self._loaded.get(slot.version) is slot:
            del self._loaded[slot.version]
        slot.retiring = True
        self._draining.append(slot)
        task = asyncio.create_task(self._drain_and_shut_down(slot, rec), name=f"rtrl-drain-v{slot.version}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain_and_shut_down(self, slot: Loaded, rec: SwapRecord) -> None:
        t0 = time.monotonic()
        deadline = t0 + self.cfg.drain_timeout_s
        while slot.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        rec.drain_s = round(time.monotonic() - t0, 3)
        if slot.in_flight:
            log.warning("version %s still had %d requests after drain_timeout_s=%.0f; shutting it down anyway",
                        slot.version, slot.in_flight, self.cfg.drain_timeout_s)
        try:
            await _shut_down(slot.engine)
            rec.old_engine_shut_down = True
        except Exception as e:  # noqa: BLE001 -- a failing shutdown must not take the gateway down
            log.warning("shutting down the engine of version %s failed: %s", slot.version, e)
        finally:
            self._draining = [s for s in self._draining if s is not slot]

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.registry_poll_s)
            await self.poll_once()
