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

Spares (`serving.spare_engines`, serving/spares.py; CPU only): a load first asks for an idle engine on the wanted
cores and reloads its weights in place; a retired engine that has drained becomes a spare instead of shutting down
when the pool has room.

In-place swaps (`serving.swap`; the default on GPUs, where a second engine needs a second share of the device): when
the new version has the old one's architecture, no spare is idle and no other alias or stage holds the old engine,
the swap keeps one engine:

  1. the alias switches at once to a slot of the new version on the same engine, whose requests wait (`Loaded.ready`)
     until its weights are the new version's;
  2. the requests already on the old version finish on the old weights (their trajectories are the old version's);
  3. the engine reloads the new weights in place (`VllmEngine.reload`) and the waiting requests go.

Nothing fails; new requests wait for the drain and the reload instead. A reload that fails shuts that engine down
and loads a fresh one of the new version for the waiting requests.

Placement (GPUs): an alias's engine starts on its arms' `devices` with their `gpu_memory_utilization` (the loader's
keyword arguments); staged versions and spares use the loader's defaults.
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

from registry.delta import DeltaMismatch
from serving.affinity import on_cores
from serving.config import ServingConfig
from serving.engine import same_architecture
from serving.engine_args import is_gpu
from serving.lora import is_adapter
from serving.spares import Spares

log = logging.getLogger("rtrl.serving.arms")

RETRY_FAILED_S = 60.0
PREFETCHED_SHOWN = 20  # prefetches /health lists (the newest)


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
    ready: asyncio.Event | None = None   # unset while an in-place swap reloads the engine to `version`
    error: str = ""                      # why a slot that waited for its reload has no engine

    async def wait_ready(self) -> None:
        """Return once the engine serves `version` (at once, unless an in-place swap is reloading it);
        RuntimeError when that swap left no engine."""
        if self.ready is not None:
            await self.ready.wait()
        if self.error:
            raise RuntimeError(self.error)


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
    in_place: bool = False        # the old engine drained and reloaded the new weights (no second engine)
    reload_s: float | None = None  # in place: seconds the reload took (new requests waited drain_s + reload_s)
    fallback: str = ""             # "master": the served copy failed verification; the float32 master was loaded

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Stage:
    """A staged version: pinned requests reach it until the last gate that staged it unstages it."""
    at: float                    # monotonic time it was (last) staged
    holds: int = 0               # stages not unstaged yet (gates running on it at once)


@dataclass
class Fleet:
    """Arms' engines. `loader(version, folder, **placement)` builds an engine (blocking; run in a thread; placement:
    `cpu_cores`, `devices`, `gpu_memory_utilization` when set); `registry` has `version_of(alias)` and
    `served_path(version)` (registry.client.Registry); `device` is where the engines run ("cpu", "cuda")."""

    cfg: ServingConfig
    registry: Any
    loader: Callable[..., Any]
    swaps: list[SwapRecord] = field(default_factory=list)
    ready: bool = False
    last_error: str = ""
    device: str = "cpu"

    def __post_init__(self):
        self.arm_alias = {a.name: a.alias for a in self.cfg.arms}
        self.per_org = {a.name for a in self.cfg.arms if a.per_org}
        self.org_aliases: list[str] = []          # `<alias>@<org>` of per-org arms' aliases, for the orgs found
        self._staged: dict[str, Stage] = {}
        self._by_alias: dict[str, Loaded] = {}
        self._loaded: dict[str, Loaded] = {}      # serving (not retiring) engines by version
        self._failed: dict[str, float] = {}       # version -> monotonic time its load failed
        self._draining: list[Loaded] = []         # retired engines finishing their requests
        self._tasks: set[asyncio.Task] = set()
        self._poller: asyncio.Task | None = None
        self._prefetching: asyncio.Task | None = None
        self._prefetched: set[str] = set()        # versions whose served copy was built ahead of a load
        self.prefetched: dict[str, float] = {}    # version -> seconds its prefetch took (the last few; /health)
        self._swap_lock = asyncio.Lock()
        self.gpu = is_gpu(self.device)
        self.spares = Spares(0 if self.gpu else self.cfg.spare_engines,   # CPU-only (an idle spare holds a GPU share)
                             self.cfg.spare_cpu_cores or self.cfg.cpu_cores, self.loader, _shut_down)
        self.placement: dict[str, dict] = {}     # alias -> the loader's devices / gpu_memory_utilization
        for arm in self.cfg.arms:
            if arm.devices or arm.gpu_memory_utilization is not None:
                self.placement.setdefault(arm.alias, {k: v for k, v in (("devices", arm.devices), (
                    "gpu_memory_utilization", arm.gpu_memory_utilization)) if v})

    @property
    def in_place_swaps(self) -> bool:
        """Whether a swap to a checkpoint of the same architecture reloads the old engine (serving.swap)."""
        return self.cfg.swap == "in_place" or (self.cfg.swap == "auto" and self.gpu)

    # -- start / stop -------------------------------------------------------------------------------------------

    @property
    def aliases(self) -> list[str]:
        return list(dict.fromkeys([*self.arm_alias.values(), *self.org_aliases]))

    async def start(self) -> None:
        """Resolve every alias and load its engine (one per distinct version). LookupError when one is unset.
        Then the orgs' aliases of per-org arms, those that are set."""
        for alias in list(dict.fromkeys(self.arm_alias.values())):
            version = await asyncio.to_thread(self.registry.version_of, alias)
            if version is None:
                raise LookupError(f"registry alias {alias!r} is not set (run `rtrl bootstrap` to make and register "
                                  "the default policy, or point the alias at a version)")
            self._by_alias[alias] = await self._get_or_load(version, alias=alias)
        await self._find_org_aliases()
        for alias in self.org_aliases:
            version = await asyncio.to_thread(self.registry.version_of, alias)
            if version is not None:
                self._by_alias[alias] = await self._get_or_load(version, alias=alias)
        self.ready = True
        self._replenish()

    async def _find_org_aliases(self) -> None:
        """The orgs with a lineage in the registry (`Registry.orgs`), for the per-org arms' aliases."""
        if not self.per_org:
            return
        orgs = await asyncio.to_thread(self.registry.orgs)
        bases = sorted({self.arm_alias[arm] for arm in self.per_org})
        found = [f"{alias}@{org}" for alias in bases for org in orgs]
        held = [alias for alias in self._by_alias if "@" in alias]      # still served: watched until it goes away
        self.org_aliases = sorted(set(found) | set(held))

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
        if self._prefetching is not None:
            self._prefetching.cancel()
            await asyncio.gather(self._prefetching, return_exceptions=True)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        # all at once: a vLLM engine's shutdown is mostly waiting (~5 s on CPU), four in a row would be 20 s
        await asyncio.gather(*(_shut_down(slot.engine) for slot in list(self._loaded.values())), self.spares.close())
        self._loaded.clear()
        self._by_alias.clear()
        self.ready = False

    # -- serving ------------------------------------------------------------------------------------------------

    def lease(self, arm: str, org: str | None = None):
        """The arm's current engine, held for the request's whole life (a swap waits for it to be released). A
        per-org arm gives `org`'s specialized champion when it has one."""
        alias = self.arm_alias[arm]
        if org is not None and arm in self.per_org:
            slot = self._by_alias.get(f"{alias}@{org}")
            if slot is not None:
                return _hold(slot)
        return _hold(self._by_alias[alias])

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
                "orgs": {alias: self._by_alias[alias].version for alias in self.org_aliases if alias in self._by_alias},
                "arms": {arm: {"alias": alias, "version": self._by_alias[alias].version if alias in self._by_alias
                               else None} for arm, alias in self.arm_alias.items()},
                "engines": [{"version": s.version, "in_flight": s.in_flight, "retiring": s.retiring,
                             "cpu_cores": getattr(s.engine, "cpu_cores", ""),
                             **({"devices": s.engine.devices} if getattr(s.engine, "devices", "") else {}),
                             **({"reloading": True} if s.ready is not None and not s.ready.is_set() else {})}
                            for s in self._all_slots()],
                "staged": self.staged, "spares": self.spares.status(), "prefetched": dict(self.prefetched),
                "swaps": [s.as_dict() for s in self.swaps[-20:]], "last_error": self.last_error}

    def engine_stats(self) -> list[tuple[str, str, object]]:
        """(version, engine serial, its vLLM statistics) of every engine serving or draining that keeps them."""
        return [(s.version, str(getattr(s.engine, "serial", "")), s.engine.stats) for s in self._all_slots()
                if getattr(s.engine, "stats", None) is not None]

    def _all_slots(self) -> list[Loaded]:
        return [*self._loaded.values(), *self._draining]

    # -- loading, staging, hot swap -----------------------------------------------------------------------------

    async def _get_or_load(self, version: str, cpu_cores: str = "", alias: str | None = None) -> Loaded:
        if (slot := self._loaded.get(version)) is not None:
            return slot
        folder = await asyncio.to_thread(self.registry.served_path, version)
        # an adapter runs on its base's engine (serving/lora.py), never on a spare of another checkpoint
        engine = None if is_adapter(folder) else await self.spares.take(version, folder,
                                                                          cpu_cores or self.cfg.cpu_cores)
        if engine is None:
            engine = await asyncio.to_thread(self.loader, version, folder, **self._placement_of(alias, cpu_cores))
        slot = self._loaded[version] = Loaded(version, engine)
        return slot

    def _placement_of(self, alias: str | None, cpu_cores: str = "") -> dict:
        """The loader's keyword arguments for an engine of `alias` (a stage: none but its cores)."""
        return {**({"cpu_cores": cpu_cores} if cpu_cores else {}), **self.placement.get(alias or "", {})}

    def _replenish(self) -> None:
        """Start a spare engine in the background (at start) unless the pool is full."""
        if not self.spares.capacity or not self._loaded:
            return
        version = next(iter(self._loaded))
        if self.spares.replenish(version, lambda: self.registry.served_path(version)):
            log.info("starting a spare engine (cores %r) from version %s", self.spares.cores or "vLLM's choice",
                     version)

    # -- staging ------------------------------------------------------------------------------------------------

    async def stage(self, version: str, cpu_cores: str = "") -> float:
        """Load `version` (unless loaded) for pinned requests; the seconds it took (0 when it was loaded).
        `cpu_cores` binds a new engine's worker elsewhere than the arms' (vLLM CPU). Raises what the load raises."""
        async with self._swap_lock:
            t0 = time.monotonic()
            await self._get_or_load(str(version), cpu_cores)
            stage = self._staged.setdefault(str(version), Stage(0.0))
            stage.at, stage.holds = time.monotonic(), stage.holds + 1
            return round(time.monotonic() - t0, 3)

    async def unstage(self, version: str) -> bool:
        """Release one stage of `version` (gates run at once may each have staged it: the champion of several
        orgs' gates); when none is left, stop pinning it, and its engine retires unless an alias holds it. False
        when it was not staged."""
        async with self._swap_lock:
            stage = self._staged.get(str(version))
            if stage is None:
                return False
            stage.holds -= 1
            if stage.holds <= 0:
                self._drop_stage(str(version))
            return True

    def _drop_stage(self, version: str) -> None:
        """Stop pinning `version` (under the swap lock); its engine retires unless an alias holds it."""
        self._staged.pop(version)
        slot = self._loaded.get(version)
        if slot is not None and not self._held(slot):
            log.info("version %s unstaged: its engine retires", version)
            self._retire(slot, None)

    def _held(self, slot: Loaded) -> bool:
        """Whether an alias or staging still holds this engine."""
        return slot in self._by_alias.values() or slot.version in self._staged

    async def _expire_staged(self) -> None:
        now = time.monotonic()
        for version, stage in list(self._staged.items()):
            slot = self._loaded.get(version)
            if now - stage.at > self.cfg.stage_ttl_s and (slot is None or slot not in self._by_alias.values()):
                log.warning("version %s was staged %.0fs ago and no alias took it: unstaging it", version,
                            now - stage.at)
                async with self._swap_lock:       # every hold goes: the gates that staged it are long gone
                    if self._staged.get(version) is stage:
                        self._drop_stage(version)

    async def poll_once(self) -> list[SwapRecord]:
        """Check every alias once; swap those that moved. Returns the swaps made."""
        done = []
        await self._expire_staged()
        try:
            await self._find_org_aliases()
        except Exception as e:  # noqa: BLE001 -- a registry hiccup must not stop serving or polling
            self.last_error = f"listing the orgs' lineages: {type(e).__name__}: {e}"
            log.warning("%s", self.last_error)
        async with self._swap_lock:
            for alias in self.aliases:
                try:
                    version = await asyncio.to_thread(self.registry.version_of, alias)
                except Exception as e:  # noqa: BLE001 -- a registry hiccup must not stop serving or polling
                    self.last_error = f"reading alias {alias!r}: {type(e).__name__}: {e}"
                    log.warning("%s", self.last_error)
                    continue
                current = self._by_alias.get(alias)
                if current is not None and version is None and alias in self.org_aliases:
                    self._org_alias_gone(alias, current)
                    continue
                if version is None or (current is None and alias not in self.org_aliases) or (
                        current is not None and version == current.version and not current.error):
                    continue
                failed_at = self._failed.get(version)
                if failed_at is not None and time.monotonic() - failed_at < RETRY_FAILED_S:
                    continue
                rec = await (self._swap(alias, current, version) if current is not None
                             else self._org_alias_appeared(alias, version))
                if rec is not None:
                    done.append(rec)
        self._prefetch()
        return done

    def _prefetch(self) -> None:
        """Build the newest registered version's served copy in the background (registry.served_path: download,
        rebuild from its delta chain, verify), so a promotion to it finds it on this host. One at a time."""
        newest = getattr(self.registry, "newest_version", None)
        if newest is None or (self._prefetching is not None and not self._prefetching.done()):
            return

        async def fetch() -> None:
            try:
                version = await asyncio.to_thread(newest)
                if version is None or version in self._prefetched or version in self._loaded:
                    return
                self._prefetched.add(version)
                t0 = time.monotonic()
                await asyncio.to_thread(self.registry.served_path, version)
                self.prefetched[version] = round(time.monotonic() - t0, 3)
                for old in list(self.prefetched)[:-PREFETCHED_SHOWN]:
                    del self.prefetched[old]
                log.info("prefetched version %s's served weights in %.1fs", version, self.prefetched[version])
            except Exception as e:  # noqa: BLE001 -- a load of it later fetches it again and reports
                log.warning("prefetching the newest version: %s: %s", type(e).__name__, e)

        self._prefetching = asyncio.create_task(fetch(), name="rtrl-prefetch")

    def _arms_of(self, alias: str) -> list[str]:
        """The arms an alias serves: the arms on it, or for an org's `<alias>@<org>` the per-org arms on <alias>."""
        base, sep, _ = alias.partition("@")
        if sep:
            return sorted(a for a in self.per_org if self.arm_alias[a] == base)
        return [a for a, al in self.arm_alias.items() if al == alias]

    def _org_alias_gone(self, alias: str, current: Loaded) -> None:
        """An org's specialized champion went away: its requests go back to the arm's alias; its engine retires
        once drained."""
        del self._by_alias[alias]
        log.info("alias %r is gone: its org's requests go back to the shared alias", alias)
        if not self._held(current):
            self._retire(current, None)

    async def _load_for(self, alias: str, version: str, meanwhile: str) -> Loaded | None:
        """`version`'s engine for `alias`, or None when the load failed (recorded: retried after RETRY_FAILED_S;
        `meanwhile` says what serves the alias until then)."""
        try:
            slot = await self._get_or_load(version, alias=alias)
        except Exception as e:  # noqa: BLE001 -- keep serving what serves now; retry later
            self._failed[version] = time.monotonic()
            self.last_error = f"loading version {version} for alias {alias!r}: {type(e).__name__}: {e}"
            log.error("%s; %s", self.last_error, meanwhile)
            return None
        self._failed.pop(version, None)
        return slot

    async def _org_alias_appeared(self, alias: str, version: str) -> SwapRecord | None:
        """An org's specialized champion appeared: load it; its org's requests move to it."""
        t0 = time.monotonic()
        slot = await self._load_for(alias, version, "its org stays on the shared alias")
        if slot is None:
            return None
        self._by_alias[alias] = slot
        arms = self._arms_of(alias)
        rec = SwapRecord(alias=alias, arms=arms, from_version="", to_version=version,
                         at=datetime.now(timezone.utc).isoformat(), load_s=round(time.monotonic() - t0, 3),
                         in_flight_at_switch=0)
        self.swaps.append(rec)
        log.info("alias %r now serves version %s to its org on arms %s", alias, version, ", ".join(arms))
        return rec

    async def _swap(self, alias: str, current: Loaded, version: str) -> SwapRecord | None:
        t0 = time.monotonic()
        folder = await self._reloadable(alias, current, version)
        if folder is not None:
            return await self._swap_in_place(alias, current, version, folder, t0)
        log.info("alias %r moved %s -> %s: loading the new engine beside the old one", alias, current.version,
                 version)
        new = await self._load_for(alias, version, f"still serving version {current.version}")
        if new is None:
            return None
        self._to_arm_cores(new.engine)
        self._by_alias[alias] = new  # the switch: new requests now lease `new`
        arms = self._arms_of(alias)
        rec = SwapRecord(alias=alias, arms=arms, from_version=current.version, to_version=version,
                         at=datetime.now(timezone.utc).isoformat(), load_s=round(time.monotonic() - t0, 3),
                         in_flight_at_switch=current.in_flight)
        self.swaps.append(rec)
        log.info("alias %r now serves version %s (arms %s); swap took %.1fs; %d requests still on version %s",
                 alias, version, ", ".join(arms), rec.load_s, current.in_flight, current.version)
        if not self._held(current):
            self._retire(current, rec)
        return rec

    async def _reloadable(self, alias: str, current: Loaded, version: str) -> Path | None:
        """The new version's folder when this swap reloads `current`'s engine in place, else None: in-place swaps
        on (serving.swap), the version not loaded already, no spare idle, no other alias or stage on the engine,
        and the same architecture (config.json apart from names and stamps)."""
        if not self.in_place_swaps or version in self._loaded or self.spares.status()["idle"]:
            return None
        if current.version in self._staged or any(s is current for a, s in self._by_alias.items() if a != alias):
            return None
        old = getattr(current.engine, "architecture", None) or getattr(current.engine, "folder", None)
        if not hasattr(current.engine, "reload") or old is None:
            return None
        try:
            folder = await asyncio.to_thread(self.registry.served_path, version)
        except Exception as e:  # noqa: BLE001 -- the blue/green path reports it (and retries later)
            log.warning("version %s: %s: %s", version, type(e).__name__, e)
            return None
        return folder if await asyncio.to_thread(same_architecture, old, folder) else None

    async def _swap_in_place(self, alias: str, current: Loaded, version: str, folder: Path,
                             t0: float) -> SwapRecord:
        """Switch the alias to a slot of `version` on the same engine, whose requests wait; let the old version's
        requests finish on the old weights; reload; release the waiting requests."""
        engine = current.engine
        new = Loaded(version, engine, ready=asyncio.Event())
        if self._loaded.get(current.version) is current:
            del self._loaded[current.version]
        self._loaded[version] = new
        self._by_alias[alias] = new  # the switch: new requests now lease `new` and wait for its weights
        arms = self._arms_of(alias)
        rec = SwapRecord(alias=alias, arms=arms, from_version=current.version, to_version=version,
                         at=datetime.now(timezone.utc).isoformat(), load_s=0.0,
                         in_flight_at_switch=current.in_flight, in_place=True)
        self.swaps.append(rec)
        log.info("alias %r moved %s -> %s: reloading its engine in place once the %d requests on version %s finish",
                 alias, current.version, version, current.in_flight, current.version)
        current.retiring = True
        self._draining.append(current)
        try:
            deadline = time.monotonic() + self.cfg.drain_timeout_s
            while current.in_flight and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            rec.drain_s = round(time.monotonic() - t0, 3)
            if current.in_flight:
                log.warning("version %s still had %d requests after drain_timeout_s=%.0f; reloading under them",
                            current.version, current.in_flight, self.cfg.drain_timeout_s)
            t1 = time.monotonic()
            try:
                await engine.reload(version, folder)
            except Exception as e:  # noqa: BLE001 -- the waiting requests get a fresh engine instead
                log.error("reloading the engine of version %s to %s in place failed (%s: %s); starting a new "
                          "engine", current.version, version, type(e).__name__, e)
                rec.old_engine_shut_down = True
                await _shut_down(engine)
                if isinstance(e, DeltaMismatch):     # the served copy is not what was shipped: the float32 master
                    rec.fallback = "master"
                    folder = await asyncio.to_thread(self.registry.master_path, version)
                new.engine = await self._fresh(alias, version, folder, new)
            rec.reload_s = round(time.monotonic() - t1, 3)
        finally:
            self._draining = [s for s in self._draining if s is not current]
            new.ready.set()
        rec.load_s = round(time.monotonic() - t0, 3)
        log.info("alias %r now serves version %s in place (arms %s): drain %.1fs, reload %.1fs", alias, version,
                 ", ".join(arms), rec.drain_s, rec.reload_s)
        return rec

    async def _fresh(self, alias: str, version: str, folder: Path, slot: Loaded):
        """A new engine of `version` for a slot whose in-place reload failed (None, with `slot.error`, when that
        fails too: its requests get a 500 and the next alias move loads anew)."""
        try:
            return await asyncio.to_thread(self.loader, version, folder, **self._placement_of(alias))
        except Exception as e:  # noqa: BLE001 -- nothing left to serve this version with
            slot.error = self.last_error = f"loading version {version} for alias {alias!r}: {type(e).__name__}: {e}"
            log.error("%s", self.last_error)
            self._loaded.pop(version, None)
            self._failed[version] = time.monotonic()   # the poller loads it anew after RETRY_FAILED_S
            return None

    def _to_arm_cores(self, engine) -> None:
        """An engine that starts serving an arm moves to the arms' cores (a candidate staged on a spare or on the
        gate's cores otherwise serves live traffic beside the trainer: serving/affinity.py). CPU only."""
        if self.cfg.cpu_cores and not self.gpu:
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
            if slot.engine is None:   # an in-place swap whose reload and fresh load failed: nothing to stop
                return
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
