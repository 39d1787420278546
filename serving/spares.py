"""Warm spare engines: a version staged or swapped in takes an idle engine and reloads its weights in place.

Starting a vLLM engine is two new processes that import torch and vLLM: ~25-50 s on a loaded 2-core machine, while
the weights of the default policy load in ~0.03 s. With `serving.spare_engines = N` the fleet keeps up to N idle
engines (bound to `serving.spare_cpu_cores`), so the gate's candidate stage and a hot swap take a reload, not an
engine start (`VllmEngine.reload`: weights replaced in the worker, prefix cache emptied). CPU-only and opt-in:
`serving.spare_engines` is 0 by default (an idle spare would hold a GPU's memory), and the demo's overlay
(infra/configs/demo.toml) turns it on.

Where spares come from:
  * `replenish` fills the pool in the background when serving starts, one engine after another (two vLLM
    starts on the spares' core at once would stall each other);
  * a retired engine (hot swap, unstaged candidate) whose requests have drained joins the pool when it has room and
    it is on the spares' cores or can be moved there (a promoted spare was moved to the arms' cores:
    serving/affinity.py). In steady state each promotion retires the old champion's engine, which
    becomes the next candidate's. No spare is started mid-run: on a CPU-bound machine (the demo's 2 cores) a
    background start costs the steps running beside it the same CPU time as the load it would save.

An engine that fails its reload (another architecture, a dead worker) is shut down and the caller loads a fresh
engine: a spare can make a load faster, never make it fail.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable

from serving.affinity import on_cores

log = logging.getLogger("rtrl.serving.spares")


class Spares:
    """Up to `capacity` idle engines bound to `cores`. `loader(version, folder, **{"cpu_cores": cores})` starts
    one (blocking; run in a thread); `shut_down(engine)` stops one."""

    def __init__(self, capacity: int, cores: str, loader: Callable[..., Any],
                 shut_down: Callable[[Any], Awaitable[None]]):
        self.capacity, self.cores = capacity, cores
        self._loader, self._shut_down = loader, shut_down
        self._idle: list[Any] = []
        self._loading: asyncio.Task | None = None
        self.reloads = 0          # versions served by a reloaded spare
        self.started = 0          # spares started by `replenish`
        self.kept = 0             # retired engines kept as spares

    def status(self) -> dict:
        return {"capacity": self.capacity, "cores": self.cores, "idle": len(self._idle),
                "loading": self._loading is not None and not self._loading.done(), "reloads": self.reloads,
                "started": self.started, "kept_retired": self.kept}

    async def take(self, version: str, folder: Path, cores: str) -> Any | None:
        """An idle engine on `cores` now serving `version` (weights reloaded from `folder`; moved to `cores` when
        the spares live on others: serving/affinity.py), or None: no spare, `cores` is vLLM's choice ("") while the
        spares are bound, the move failed, or the reload failed (that engine is shut down). Waits for the next
        spare while the pool fills."""
        if self.capacity == 0 or (cores != self.cores and not cores):
            return None
        while not self._idle and self._loading is not None and not self._loading.done():   # the next one is starting
            await asyncio.wait({self._loading}, timeout=0.1)
        while self._idle:
            engine = self._idle.pop()
            if not on_cores(engine, cores):
                self._idle.append(engine)
                return None
            try:
                await engine.reload(version, folder)
            except Exception as e:  # noqa: BLE001 -- a spare may make a load faster, never make it fail
                log.warning("reloading a spare engine to version %s failed (%s: %s); starting a new engine",
                            version, type(e).__name__, e)
                await self._shut_down(engine)
                continue
            self.reloads += 1
            return engine
        return None

    def offer(self, engine: Any) -> bool:
        """Keep a retired, drained engine as a spare when there is room and it is (or can be moved) on the spares'
        cores."""
        if len(self._idle) >= self.capacity or not hasattr(engine, "reload") or not on_cores(engine, self.cores):
            return False
        self._idle.append(engine)
        self.kept += 1
        return True

    def replenish(self, version: str, folder: Callable[[], Path]) -> bool:
        """Fill the pool in the background (engines from `folder()`, labelled `version`), one start at a time,
        until the idle ones reach `capacity`. False when it is full or being filled already."""
        starting = self._loading is not None and not self._loading.done()
        if starting or len(self._idle) >= self.capacity:
            return False
        self._loading = asyncio.create_task(self._fill(version, folder), name="rtrl-spare-engines")
        return True

    async def _fill(self, version: str, folder: Callable[[], Path]) -> None:
        while len(self._idle) < self.capacity:
            if not await self._start(version, folder):
                return

    async def _start(self, version: str, folder: Callable[[], Path]) -> bool:
        """Start one spare; False when that failed."""
        try:
            path = await asyncio.to_thread(folder)
            extra = {"cpu_cores": self.cores} if self.cores else {}
            engine = await asyncio.to_thread(self._loader, version, path, **extra)
        except Exception as e:  # noqa: BLE001 -- no spare: the next stage loads an engine as without spares
            log.warning("starting a spare engine failed: %s: %s", type(e).__name__, e)
            return False
        self.started += 1
        if len(self._idle) >= self.capacity:   # a retired engine filled the pool meanwhile
            await self._shut_down(engine)
        else:
            self._idle.append(engine)
            log.info("spare engine ready (cores %r; %d of %d)", self.cores or "vLLM's choice", len(self._idle),
                     self.capacity)
        return True

    async def close(self) -> None:
        if self._loading is not None:
            await asyncio.gather(self._loading, return_exceptions=True)
        idle, self._idle = self._idle, []
        await asyncio.gather(*(self._shut_down(engine) for engine in idle))
