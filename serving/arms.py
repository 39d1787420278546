"""A/B arms → registry aliases → engines, and hot swaps when an alias moves (docs/serving.md).

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

Staging (the gate, docs/gate.md): `stage(version)` loads a version beside the arms' engines without giving it to
any arm; requests pinned to it (`lease_version`) reach it, none is routed to it. The gate evaluates a candidate
through the engine serving will use, and when the candidate is promoted the alias moves to an engine that is
already loaded: the swap is a switch, no load. `unstage(version)` retires it unless an alias holds it; a staged
version no alias holds is unstaged by the poller after `stage_ttl_s` (a gate that died leaks nothing).

Spares (`serving.spare_engines`, serving/spares.py): a load first asks for an idle engine on the wanted cores and
reloads its weights in place; a retired engine that has drained becomes a spare instead of shutting down when the
pool has room.
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

from serving.affinity import on_cores
from serving.config import ServingConfig
from serving.spares import Spares

log = logging.getLogger("rtrl.serving.arms")

RETRY_FAILED_S = 60.0


def _version_key(v: str) -> tuple[int, str]:
    return (int(v), "") if v.isdigit() else (1 << 62, v)


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


@contextmanager
def _hold(slot: Loaded) -> Iterator[Loaded]:
    slot.in_flight += 1
    try:
        yield slot
    finally:
        slot.in_flight -= 1


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
    old_engine_kept_spare: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Fleet:
    """Arms' engines. `loader(version, folder)` builds an engine (blocking; run in a thread); `registry` has
    `version_of(alias)` and `local_path(version)` (registry.client.Registry)."""

    cfg: ServingConfig
    registry: Any
    loader: Callable[[str, Path], Any]
    swaps: list[SwapRecord] = field(default_factory=list)
    ready: bool = False
    last_error: str = ""

    def __post_init__(self):
        self.arm_alias = {a.name: a.alias for a in self.cfg.arms}
        self._staged: dict[str, float] = {}      # version -> monotonic time it was (last) staged
        self._by_alias: dict[str, Loaded] = {}
        self._loaded: dict[str, Loaded] = {}      # serving (not retiring) engines by version
        self._failed: dict[str, float] = {}       # version -> monotonic time its load failed
        self._draining: list[Loaded] = []         # retired engines finishing their requests
        self._tasks: set[asyncio.Task] = set()
        self._poller: asyncio.Task | None = None
        self._swap_lock = asyncio.Lock()
        self.spares = Spares(self.cfg.spare_engines, self.cfg.spare_cpu_cores or self.cfg.cpu_cores, self.loader,
                             _shut_down)

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
        self._replenish()

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
        # all at once: a vLLM engine's shutdown is mostly waiting (~5 s on CPU), four in a row would be 20 s
        await asyncio.gather(*(_shut_down(slot.engine) for slot in list(self._loaded.values())), self.spares.close())
        self._loaded.clear()
        self._by_alias.clear()
        self.ready = False

    # -- serving ------------------------------------------------------------------------------------------------

    def lease(self, arm: str):
        """The arm's current engine, held for the request's whole life (a swap waits for it to be released)."""
        return _hold(self._by_alias[self.arm_alias[arm]])

    def lease_version(self, version: str):
        """The engine of a staged version (evaluation traffic), held for the request's life. LookupError (now,
        not on entering the block) when the version is not staged."""
        slot = self._loaded.get(version) if version in self._staged else None
        if slot is None:
            raise LookupError(f"version {version} is not staged on this server")
        return _hold(slot)

    @property
    def staged(self) -> list[str]:
        return sorted(self._staged, key=_version_key)

    def arm_versions(self) -> dict[str, str]:
        return {arm: self._by_alias[alias].version for arm, alias in self.arm_alias.items() if alias in self._by_alias}

    def status(self) -> dict:
        return {"ready": self.ready,
                "arms": {arm: {"alias": alias, "version": self._by_alias[alias].version if alias in self._by_alias
                               else None} for arm, alias in self.arm_alias.items()},
                "engines": [{"version": s.version, "in_flight": s.in_flight, "retiring": s.retiring,
                             "cpu_cores": getattr(s.engine, "cpu_cores", "")} for s in self._all_slots()],
                "staged": self.staged, "spares": self.spares.status(),
                "swaps": [s.as_dict() for s in self.swaps[-20:]], "last_error": self.last_error}

    def _all_slots(self) -> list[Loaded]:
        return [*self._loaded.values(), *self._draining]

    # -- loading, staging, hot swap -----------------------------------------------------------------------------

    async def _get_or_load(self, version: str, cpu_cores: str = "") -> Loaded:
        if (slot := self._loaded.get(version)) is not None:
            return slot
        folder = await asyncio.to_thread(self.registry.local_path, version)
        engine = await self.spares.take(version, folder, cpu_cores or self.cfg.cpu_cores)
        if engine is None:
            extra = {"cpu_cores": cpu_cores} if cpu_cores else {}
            engine = await asyncio.to_thread(self.loader, version, folder, **extra)
        slot = self._loaded[version] = Loaded(version, engine)
        return slot

    def _replenish(self) -> None:
        """Start a spare engine in the background (at start) unless the pool is full."""
        if not self.spares.capacity or not self._loaded:
            return
        version = next(iter(self._loaded))
        if self.spares.replenish(version, lambda: self.registry.local_path(version)):
            log.info("starting a spare engine (cores %r) from version %s", self.spares.cores or "vLLM's choice",
                     version)

    # -- staging ------------------------------------------------------------------------------------------------

    async def stage(self, version: str, cpu_cores: str = "") -> float:
        """Load `version` (unless loaded) for pinned requests; the seconds it took (0 when it was loaded).
        `cpu_cores` binds a new engine's worker elsewhere than the arms' (vLLM CPU). Raises what the load raises."""
        async with self._swap_lock:
            t0 = time.monotonic()
            await self._get_or_load(str(version), cpu_cores)
            self._staged[str(version)] = time.monotonic()
            return round(time.monotonic() - t0, 3)

    async def unstage(self, version: str) -> bool:
        """Stop pinning `version`; its engine retires unless an alias holds it. False when it was not staged."""
        async with self._swap_lock:
            if self._staged.pop(str(version), None) is None:
                return False
            slot = self._loaded.get(str(version))
            if slot is not None and not self._held(slot):
                log.info("version %s unstaged: its engine retires", version)
                self._retire(slot, None)
            return True

    def _held(self, slot: Loaded) -> bool:
        """Whether an alias or staging still holds this engine."""
        return slot in self._by_alias.values() or slot.version in self._staged

    async def _expire_staged(self) -> None:
        now = time.monotonic()
        for version, at in list(self._staged.items()):
            slot = self._loaded.get(version)
            if now - at > self.cfg.stage_ttl_s and (slot is None or slot not in self._by_alias.values()):
                log.warning("version %s was staged %.0fs ago and no alias took it: unstaging it", version, now - at)
                await self.unstage(version)

    async def poll_once(self) -> list[SwapRecord]:
        """Check every alias once; swap those that moved. Returns the swaps made."""
        done = []
        await self._expire_staged()
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
        self._to_arm_cores(new.engine)
        self._by_alias[alias] = new  # the switch: new requests now lease `new`
        arms = [a for a, al in self.arm_alias.items() if al == alias]
        rec = SwapRecord(alias=alias, arms=arms, from_version=current.version, to_version=version,
                         at=datetime.now(timezone.utc).isoformat(), load_s=round(time.monotonic() - t0, 3),
                         in_flight_at_switch=current.in_flight)
        self.swaps.append(rec)
        log.info("alias %r now serves version %s (arms %s); swap took %.1fs; %d requests still on version %s",
                 alias, version, ", ".join(arms), rec.load_s, current.in_flight, current.version)
        if not self._held(current):
            self._retire(current, rec)
        return rec

    def _to_arm_cores(self, engine) -> None:
        """An engine that starts serving an arm moves to the arms' cores (a candidate staged on a spare or on the
        gate's cores otherwise serves live traffic beside the trainer: serving/affinity.py)."""
        if self.cfg.cpu_cores:
            on_cores(engine, self.cfg.cpu_cores)

    def _retire(self, slot: Loaded, rec: SwapRecord | None) -> None:
        if self._loaded.get(slot.version) is slot:
            del self._loaded[slot.version]
        slot.retiring = True
        self._draining.append(slot)
        task = asyncio.create_task(self._drain_and_shut_down(slot, rec), name=f"rtrl-drain-v{slot.version}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drain_and_shut_down(self, slot: Loaded, rec: SwapRecord | None) -> None:
        t0 = time.monotonic()
        deadline = t0 + self.cfg.drain_timeout_s
        while slot.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if rec is not None:
            rec.drain_s = round(time.monotonic() - t0, 3)
        if slot.in_flight:
            log.warning("version %s still had %d requests after drain_timeout_s=%.0f; shutting it down anyway",
                        slot.version, slot.in_flight, self.cfg.drain_timeout_s)
        try:
            if not slot.in_flight and self.spares.offer(slot.engine):
                log.info("the engine of version %s is kept as a spare", slot.version)
                if rec is not None:
                    rec.old_engine_kept_spare = True
                return
            await _shut_down(slot.engine)
            if rec is not None:
                rec.old_engine_shut_down = True
        except Exception as e:  # noqa: BLE001 -- a failing shutdown must not take the gateway down
            log.warning("shutting down the engine of version %s failed: %s", slot.version, e)
        finally:
            self._draining = [s for s in self._draining if s is not slot]

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.registry_poll_s)
            await self.poll_once()
