"""LoRA adapters as registry versions: served by an engine of their base checkpoint, one vLLM `LoRARequest` per
request (docs/serving.md, "LoRA adapters").

A registered version is an adapter when its folder is a peft adapter folder (`adapter_config.json`); its base is the
registry version named `lora_base` in its rtrl_metadata.json, else in its registry tags (the trainer writes both).

    loader = with_adapters(start, registry, cfg)       # start(version, folder, lora=False, **placement) -> engine
    engine = loader("7", folder_of_7)                   # v7 an adapter of v3: v3's engine, LoRA on, + v7's adapter

Every adapter of one base (on the same placement) shares one LoRA-enabled engine of that base: it starts with the
first adapter and shuts down when the last one's engine is released. With `share_base` (the specialized arm, or
`serving.enable_lora`) a full checkpoint is served from that same engine too, as a view without an adapter: one
engine serves the base model and every adapter over it (vLLM multi-LoRA), e.g. the shared champion and each org's
specialized adapter. A hot swap from one adapter to another of the
same base loads no engine and reloads nothing: the new version is a new `LoRARequest` on the engine already running
(vLLM loads the adapter's weights on its first request), and the old adapter's requests finish beside it (up to
`serving.max_loras` adapters run in one batch). The tokenizer and chat template are the base's.
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from registry.client import ADAPTER_CONFIG, is_adapter
from registry.client import LORA_BASE as BASE_KEY   # rtrl_metadata.json key and registry tag: the adapter's base

log = logging.getLogger("rtrl.serving.lora")
METADATA = "rtrl_metadata.json"


def base_version(version: str, folder: str | Path, registry: Any) -> str:
    """The registry version an adapter was trained on: rtrl_metadata.json's `lora_base`, else the version's tag.
    ValueError when neither names one."""
    meta = Path(folder) / METADATA
    if meta.is_file():
        base = json.loads(meta.read_text()).get(BASE_KEY)
        if base not in (None, ""):
            return str(base)
    info = getattr(registry, "info", None)
    base = info(version).tags.get(BASE_KEY) if info is not None else None
    if not base:
        raise ValueError(f"version {version} is a LoRA adapter ({folder}) but names no base version: "
                         f"{METADATA} and its registry tags lack {BASE_KEY!r}")
    return str(base)


def adapter_rank(folder: str | Path) -> int:
    return int(json.loads((Path(folder) / ADAPTER_CONFIG).read_text()).get("r", 0))


@dataclass(frozen=True)
class Adapter:
    """What vLLM's `LoRARequest` needs (serving/engine.py builds it): a name, an id unique per adapter, a path."""

    name: str
    id: int
    path: str

    @classmethod
    def of(cls, version: str, folder: str | Path) -> "Adapter":
        # registry versions are unique and never change: the version number is the adapter's id
        number = int(version) if version.isdigit() else 0
        return cls(f"v{version}", number if number > 0 else zlib.crc32(version.encode()) | 1, str(folder))

    def request(self):
        from vllm.lora.request import LoRARequest

        return LoRARequest(self.name, self.id, self.path)


class _Host:
    """A base version's LoRA-enabled engine and how many adapter engines use it."""

    def __init__(self, engine):
        self.engine, self.users = engine, 0


class AdapterEngine:
    """A registered adapter version: the engine of its base with this adapter on every request. It has the
    engine interface the gateway uses (prompt_ids, sample, stream, finish, partial_text); no `reload` (a swap to
    another adapter of the base is a new AdapterEngine on the same base engine) and no `bind` (the base engine is
    shared)."""

    def __init__(self, version: str, folder: Path, base: str, host: _Host, release: Callable[[_Host], Any],
                 adapter: bool = True):
        self.version, self.folder, self.base_version = version, Path(folder), base
        self.adapter = Adapter.of(version, folder) if adapter else None   # None: the base model itself
        self._host, self._release = host, release
        self.released = False

    @property
    def base(self):
        return self._host.engine

    @property
    def max_model_len(self) -> int:
        return self.base.max_model_len

    @property
    def sampling(self):
        return self.base.sampling

    @property
    def cpu_cores(self) -> str:
        return getattr(self.base, "cpu_cores", "")

    @property
    def devices(self) -> str:
        return getattr(self.base, "devices", "")

    def prompt_ids(self, messages, tools=None) -> list[int]:
        return self.base.prompt_ids(messages, tools=tools)

    async def sample(self, prompt_ids, spec, request_id: str = "", **extra):
        return await self.base.sample(prompt_ids, spec, request_id=request_id, adapter=self.adapter, **extra)

    async def stream(self, prompt_ids, spec, request_id: str = ""):
        async for delta in self.base.stream(prompt_ids, spec, request_id=request_id, adapter=self.adapter):
            yield delta

    def finish(self, *args, **kwargs):
        return self.base.finish(*args, **kwargs)

    def partial_text(self, ids) -> str:
        return self.base.partial_text(ids)

    async def aclose(self) -> None:
        """Release the base engine (shut down with its last adapter)."""
        if self.released:
            return
        self.released = True
        engine = self._release(self._host)
        if engine is not None:
            if hasattr(engine, "aclose"):
                await engine.aclose()
            else:
                engine.shutdown()

    def shutdown(self) -> None:
        if not self.released:
            self.released = True
            engine = self._release(self._host)
            if engine is not None:
                engine.shutdown()


class AdapterHosts:
    """The loader of adapter versions: `(version, folder, **placement)` → an AdapterEngine on its base's shared
    LoRA-enabled engine, started by `start(base, base_folder, lora=True, **placement)` (blocking: call it from a
    thread, as Fleet does). ValueError for an adapter without a base or of a rank over `max_lora_rank`."""

    def __init__(self, start: Callable[..., Any], registry: Any, max_lora_rank: int):
        self._start, self.registry, self.max_lora_rank = start, registry, max_lora_rank
        self._hosts: dict[tuple, _Host] = {}
        self._lock = threading.Lock()   # one base start at a time: two adapters of one base share the first's
        self.started = 0

    def __call__(self, version: str, folder: str | Path, **placement) -> AdapterEngine:
        rank = adapter_rank(folder)
        if rank > self.max_lora_rank:
            raise ValueError(f"version {version} is a LoRA adapter of rank {rank}, over serving.max_lora_rank = "
                             f"{self.max_lora_rank}")
        base = base_version(version, folder, self.registry)
        host = self._host(base, None, placement, version)
        log.info("adapter version %s served by the engine of base version %s (%d versions on it)", version, base,
                 host.users)
        return AdapterEngine(version, Path(folder), base, host, self._release)

    def base_view(self, version: str, folder: str | Path, **placement) -> AdapterEngine:
        """The full checkpoint `version` served from its LoRA-enabled engine, without an adapter: the engine its
        adapters share."""
        return AdapterEngine(version, Path(folder), version, self._host(version, Path(folder), placement, version),
                             self._release, adapter=False)

    def _host(self, base: str, base_folder: Path | None, placement: dict, version: str) -> _Host:
        """The LoRA-enabled engine of `base` on `placement`, started when none runs; one more user on it."""
        key = (base, tuple(sorted(placement.items())))
        with self._lock:
            host = self._hosts.get(key)
            if host is None:
                base_folder = base_folder or self.registry.served_path(base)
                if is_adapter(base_folder):
                    raise ValueError(f"version {version}'s base {base} is itself an adapter; a base is a checkpoint")
                log.info("starting the LoRA-enabled engine of base version %s for version %s", base, version)
                host = self._hosts[key] = _Host(self._start(base, base_folder, lora=True, **placement))
                self.started += 1
            host.users += 1
        return host

    def _release(self, host: _Host):
        """One adapter fewer on `host`; its engine when that was the last one (for the caller to shut down)."""
        with self._lock:
            host.users -= 1
            if host.users > 0:
                return None
            for key, h in list(self._hosts.items()):
                if h is host:
                    del self._hosts[key]
            return host.engine

    def status(self) -> dict:
        with self._lock:
            return {h.engine.version: h.users for h in self._hosts.values()}


def with_adapters(start: Callable[..., Any], registry: Any, max_lora_rank: int,
                  share_base: bool = False) -> Callable[..., Any]:
    """Fleet's loader: adapter folders to `AdapterHosts`, checkpoints to `start(version, folder, **placement)`, or
    with `share_base` to their LoRA-enabled engine (`AdapterHosts.base_view`), which their adapters then share."""
    hosts = AdapterHosts(start, registry, max_lora_rank)

    def loader(version: str, folder: str | Path, **placement):
        if is_adapter(folder):
            return hosts(version, folder, **placement)
        if share_base:
            return hosts.base_view(version, folder, **placement)
        return start(version, folder, **placement)

    loader.adapters = hosts
    return loader
