"""Stand-ins for vLLM and the MLflow registry, so the gateway, the router and hot swaps are tested in milliseconds."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from schemas.chat_format import render
from serving.config import ServingConfig
from serving.protocol import Delta, Generation, SampleSpec, Sampling, cut_at_stop


class FakeRegistry:
    """Aliases in a dict; `served_path` returns the folder `folders` names for a version, else a made-up one;
    `master_path` (and `local_path`) the one `masters` names, else the same."""

    def __init__(self, aliases: dict[str, str], folders: dict[str, Path] | None = None):
        self.aliases = dict(aliases)
        self.folders = dict(folders or {})
        self.masters: dict[str, Path] = {}
        self.fail_reads = False
        self.newest: str | None = None            # what `newest_version` answers (serving prefetches it)
        self.served_calls: list[str] = []

    def version_of(self, alias: str) -> str | None:
        if self.fail_reads:
            raise OSError("registry unreachable")
        return self.aliases.get(alias)

    def served_path(self, version: str) -> Path:
        self.served_calls.append(version)
        return self.folders.get(version, Path(f"/nonexistent/v{version}"))

    def newest_version(self) -> str | None:
        return self.newest

    def master_path(self, version: str) -> Path:
        return self.masters.get(version) or self.served_path(version)

    local_path = master_path

    def orgs(self) -> list[str]:
        """The orgs whose lineage has an alias here (`<alias>@<org>` keys), as Registry.orgs lists them."""
        return sorted({k.partition("@")[2] for k in self.aliases if "@" in k})


class FakeEngine:
    """Answers with a scripted text (default: 'answer from v<version>'), one character per token; `delay_s` per
    request; records shutdown and in-place reloads (`reload_fails` makes the next one raise)."""

    def __init__(self, version: str, folder: Path, reply: str | None = None, delay_s: float = 0.0,
                 max_model_len: int = 1024, cpu_cores: str = ""):
        self.version, self.folder, self.cpu_cores = version, folder, cpu_cores
        self.scripted = reply
        self.reply = reply if reply is not None else f"answer from v{version}"
        self.reloads: list[str] = []
        self.reload_fails = False
        self.delay_s, self.max_model_len = delay_s, max_model_len
        self.sampling = Sampling(temperature=1.0)
        self.shut_down = False
        self.calls: list[dict] = []
        self.binds: list[str] = []        # cores it was moved to (`bind`)
        self.reply_for = None             # index -> text, for samples that differ
        self.step_s = 0.0                 # streamed: seconds per character
        self.tools_seen = None            # what the chat template was given
        self.devices, self.placement = "", {}   # where the loader put it
        self.reloading = False            # inside `reload` (reload_s > 0)
        self.reload_s = 0.0

    def prompt_ids(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        self.tools_seen = tools
        return [ord(c) % 500 for c in render(messages)]

    def _text(self, spec: SampleSpec, index: int) -> tuple[str, str]:
        """(the sample's text, why it ended): the reply (`reply_for(index)` when set), cut at a stop string or at
        max_tokens."""
        text = self.reply_for(index) if self.reply_for else self.reply
        for stop in spec.stop:
            if stop in text:
                return text[:text.index(stop) + len(stop)], "stop"
        return text[:spec.max_tokens], "stop" if len(text) <= spec.max_tokens else "length"

    async def sample(self, prompt_ids, spec: SampleSpec, request_id="", adapter=None):
        assert not self.shut_down, "a request reached an engine that was shut down"
        assert not self.reloading, "a request reached an engine while it reloaded"
        self.calls.append({"prompt_ids": prompt_ids, "max_tokens": spec.max_tokens, "seed": spec.seed, "spec": spec,
                           "adapter": adapter, "weights": self.version})
        if self.delay_s:
            await asyncio.sleep(self.delay_s)  # a slow generation (the behaviour under test): requests stay in flight
        assert not self.reloading, "an engine reloaded under a request"
        out = []
        for i in range(spec.n):
            text, why = self._text(spec, i)
            if adapter is not None:
                text = f"{text} + {adapter.name}"
            ids = [ord(c) for c in text]
            out.append(self.finish(i, ids, [math.log(0.5)] * len(ids), [], why, spec))
        return out

    async def stream(self, prompt_ids, spec: SampleSpec, request_id="", adapter=None):
        """One character per step per sample; `step_s` between steps."""
        assert not self.shut_down, "a request reached an engine that was shut down"
        self.calls.append({"prompt_ids": prompt_ids, "max_tokens": spec.max_tokens, "seed": spec.seed, "spec": spec,
                           "stream": True, "adapter": adapter})
        texts = [self._text(spec, i) for i in range(spec.n)]
        for k in range(max(len(t) for t, _ in texts) + 1):
            for i, (text, why) in enumerate(texts):
                if k < len(text):
                    await asyncio.sleep(self.step_s)
                    yield Delta(i, [ord(text[k])], [math.log(0.5)], [], why if k == len(text) - 1 else None)
                elif k == len(text) == 0:
                    yield Delta(i, [], [], [], why)

    def finish(self, index, ids, logprobs, top, finish, spec: SampleSpec, cut_short: bool = False) -> Generation:
        text = cut_at_stop(self.partial_text(ids), spec.stop)
        return Generation(token_ids=list(ids), logprobs=list(logprobs), tokens=[chr(i) for i in ids], text=text,
                          finish_reason=finish, index=index, cut_short=cut_short)

    def partial_text(self, ids) -> str:
        return "".join(chr(i) for i in ids)

    def bind(self, cores: str) -> bool:
        if cores and cores != self.cpu_cores:
            self.binds.append(cores)
            self.cpu_cores = cores
        return bool(cores)

    async def reload(self, version: str, folder: Path) -> float:
        assert not self.shut_down, "a reload reached an engine that was shut down"
        if self.reload_fails:
            raise (self.reload_fails if isinstance(self.reload_fails, Exception)
                   else ValueError(f"cannot reload {folder}"))
        self.reloading = True
        await asyncio.sleep(self.reload_s)
        self.reloading = False
        self.version, self.folder = version, folder
        self.reply = self.scripted if self.scripted is not None else f"answer from v{version}"
        self.reloads.append(version)
        return 0.0

    def shutdown(self) -> None:
        self.shut_down = True


class FakeLoader:
    """`loader(version, folder)` for `Fleet`: FakeEngines, remembered; `fail` makes loads raise."""

    def __init__(self, **engine_kw):
        self.engines: list[FakeEngine] = []
        self.engine_kw = engine_kw
        self.fail: set[str] = set()
        self.load_delay_s = 0.0
        self.cpu_cores: dict[str, str] = {}
        self.loading = 0              # loads in progress now ...
        self.most_loading = 0         # ... and at most at once

    def __call__(self, version: str, folder: Path, cpu_cores: str = "", **placement) -> FakeEngine:
        """`placement`: what Fleet passes for a GPU arm (devices, gpu_memory_utilization) or AdapterHosts for a base
        (lora), recorded on the engine."""
        import time

        self.loading += 1
        self.most_loading = max(self.most_loading, self.loading)
        try:
            if self.load_delay_s:
                time.sleep(self.load_delay_s)  # a slow load (the behaviour under test), in the loader's thread
        finally:
            self.loading -= 1
        if version in self.fail:
            raise RuntimeError(f"cannot load v{version}")
        e = FakeEngine(version, folder, cpu_cores=cpu_cores, **self.engine_kw)
        e.devices, e.placement = placement.get("devices", ""), placement
        self.cpu_cores[version] = cpu_cores
        self.engines.append(e)
        return e


def fake_fleet(aliases: dict[str, str], device: str = "cpu", folders: dict[str, Path] | None = None, **cfg):
    """(Fleet over fake engines with a fast poll and drain and `cfg` serving keys, its registry, its loader);
    `device`: where the fleet believes its engines run; `folders`: the registry's folders of versions."""
    from serving.arms import Fleet

    reg, loader = FakeRegistry(aliases, folders), FakeLoader()
    return (Fleet(ServingConfig(registry_poll_s=0.01, drain_timeout_s=5, **cfg), reg, loader, device=device), reg,
            loader)


def checkpoint_config(folder: Path, **config) -> Path:
    """A folder with just a config.json (what serving.engine.same_architecture compares)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                                                    **config}))
    return folder


def serving_config(**kw) -> ServingConfig:
    return ServingConfig(**kw)
