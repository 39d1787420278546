"""`rtrl bench serving`: generation throughput (vLLM vs plain transformers), gateway latency, hot swap under load.

Self-contained: a private state dir, embedded stack (broker + MLflow store) on free ports, and three random-init
Llama checkpoints of the default policy's shape (`serving.testing`, `MODEL`) registered as versions 1-3. Stages:

  1. `hf_generate_tokens_per_s`: transformers `generate` (sampling, temperature 1, untruncated) on version 1,
     `--batch` prompts of `--prompt-tokens` random tokens, exactly `--new-tokens` new tokens each (min_new_tokens).
  2. `vllm_tokens_per_s`: the serving engine (`serving.engine.VllmEngine`, same settings as `rtrl serve`) on the
     same prompts and lengths (ignore_eos). Both: generated tokens / wall time of a whole batch, the best of
     `ROUNDS` batches after a warm-up.
  3. The gateway as production runs it (`rtrl serve --detach`, its own process; arms control → alias `control` →
     v1, treatment → alias `champion` → v2). `--clients` threads send chat requests (distinct users, so both arms
     get traffic) for a steady phase: `p50_latency_ms`, `p95_latency_ms` (client-side round trip, answered
     requests of both kinds). A `--stream-share` of the clients (default half, `streaming_clients`) send
     `stream: true` with `stream_options.include_usage` through the official openai client and read every stream
     to its end; a stream counts as failed when it errors, ends without a finish_reason for a choice, or ends
     before its usage chunk (cut off). `steady_by_kind` / `swap_by_kind` give streamed and non-streamed requests
     apart: counts, failures, p50/p95 latency (a stream's: until its end) and, for streamed ones, p50/p95 time
     to first token (the first chunk with content or tool calls).
     Then `champion` moves to v3 while the clients keep going: `swap_seconds` (alias moved → first answer from
     v3), `swap_load_seconds` (the gateway's own count: alias seen → v3 engine serving), `swap_drain_seconds`
     (v2's in-flight requests finished → v2 shut down), `failed_requests_during_swap` (target 0, streamed and
     non-streamed; `failed_streamed_requests_during_swap` of them streamed) and `requests_during_swap`.
  4. `delta_swap`: the gateway again, swapping in place, and v4 registered as v3's child, so shipped as a delta:
     prefetched, applied in place under load, and the served log-probs checked against the trainer's
     recomputation (infra/bench/serving_delta.py).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

from infra.argv import rtrl_argv
from infra.bench.ports import free_port


DELTA_STEADY_S = 5.0  # stage 4's load before v4 is registered
ROUNDS = 3  # throughput: the best of 3 timed batches after a warm-up, for both (the machine may be shared)
# The shape of the default policy (`rtrl bootstrap`, [policy] in rtrl.toml), random weights; the tokenizer is
# serving.testing's (about 1,370 tokens).
MODEL = {"hidden": 192, "layers": 4, "heads": 3, "intermediate": 512, "vocab_size": 1536}
# `--shape`: the default policy's, or a ~1B-parameter Llama (where the GPU, not Python, sets the step time).
SHAPES = {"default": MODEL, "1b": {"hidden": 2048, "layers": 16, "heads": 16, "intermediate": 5632, "vocab_size": 1536}}


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def _prompts(folder: Path, batch: int, length: int, seed: int = 0) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)
    ordinary = [i for i in range(len(tok)) if i not in special]
    rnd = random.Random(seed)
    return [[rnd.choice(ordinary) for _ in range(length)] for _ in range(batch)]


def hf_generate_tokens_per_s(folder: Path, prompts: list[list[int]], new_tokens: int, log,
                             device: str = "cpu", dtype: str = "float32") -> dict[int, float]:
    """tokens/s of `generate` on `device` in `dtype` (the engine's). On CPU with 1 torch thread (the compute vLLM's
    CPU worker gets: one bound core) and with every core; the baseline is the better of the two (on a shared
    2-core machine two OpenMP threads can be far slower than one). On a GPU, once (keyed by the CPU threads)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=getattr(torch, dtype)).to(device).eval()
    ids = torch.tensor(prompts, device=device)
    mask = torch.ones_like(ids)
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=model.config.eos_token_id)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    default_threads = torch.get_num_threads()
    by_threads = {}
    thread_counts = sorted({1, os.cpu_count() or 1}) if device == "cpu" else [default_threads]
    try:
        for threads in thread_counts:
            torch.set_num_threads(threads)
            rates = []
            with torch.no_grad():
                model.generate(ids, attention_mask=mask, max_new_tokens=8, min_new_tokens=8, **kw)  # warm-up
                for _ in range(ROUNDS):
                    sync()
                    t0 = time.perf_counter()
                    out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens,
                                         min_new_tokens=new_tokens, **kw)
                    sync()
                    elapsed = time.perf_counter() - t0
                    rates.append((out.shape[1] - ids.shape[1]) * ids.shape[0] / elapsed)
            by_threads[threads] = max(rates)
            log(f"hf generate on {device} ({dtype}), {threads} thread(s): {[round(r) for r in rates]} tokens/s over "
                f"{ROUNDS} rounds (batch {len(prompts)})")
    finally:
        torch.set_num_threads(default_threads)
    return by_threads


def vllm_tokens_per_s(folder: Path, prompts: list[list[int]], new_tokens: int, serving_cfg, log) -> tuple[float, float]:
    import asyncio

    from serving.engine import VllmEngine, sampling_of
    from serving.protocol import SampleSpec

    async def run() -> tuple[float, float]:
        engine = await asyncio.to_thread(VllmEngine.load, "1", folder, serving_cfg)
        try:
            async def batch() -> tuple[int, float]:
                t0 = time.perf_counter()
                spec = SampleSpec(new_tokens, sampling_of(serving_cfg))
                gens = await asyncio.gather(*[engine.sample(p, spec, ignore_eos=True) for p in prompts])
                return sum(len(g[0].token_ids) for g in gens), time.perf_counter() - t0

            await batch()  # warm-up
            rates = []
            for _ in range(ROUNDS):
                n, elapsed = await batch()
                rates.append(n / elapsed)
            log(f"vllm: {[round(r) for r in rates]} tokens/s over {ROUNDS} rounds (batch {len(prompts)}); engine "
                f"loaded in {engine.load_seconds:.1f}s")
            return max(rates), engine.load_seconds
        finally:
            await engine.aclose()

    return asyncio.run(run())


def stream_clients(clients: int, stream_share: float) -> int:
    """How many of `clients` stream: `stream_share` of them, rounded, at least one when the share is above 0 and
    at most all of them."""
    if not 0.0 <= stream_share <= 1.0:
        raise ValueError(f"stream_share must be in [0, 1] (got {stream_share})")
    if stream_share == 0 or clients <= 0:
        return 0
    return min(clients, max(1, round(clients * stream_share)))


class StreamTally:
    """What one streamed answer (OpenAI `chat.completion.chunk`s) delivered, chunk by chunk, to judge it when the
    stream is over (`problem`): every choice must end with a finish_reason and the usage chunk (asked with
    `stream_options.include_usage`, the last one before `[DONE]`) must come, else the stream was cut off."""

    def __init__(self, t0: float):
        self.t0 = t0
        self.first_token_at: float | None = None
        self.started: set[int] = set()        # choice indexes seen
        self.finished: dict[int, str] = {}    # choice index -> finish_reason
        self.usage: dict | None = None
        self.version: str | None = None
        self.arm: str | None = None
        self.chunks = 0

    def add(self, chunk, now: float) -> None:
        self.chunks += 1
        extra = getattr(chunk, "model_extra", None) or {}
        self.version = self.version or extra.get("policy_version")
        self.arm = self.arm or extra.get("arm")
        if getattr(chunk, "usage", None) is not None:
            u = chunk.usage
            self.usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}
        for c in chunk.choices or []:
            self.started.add(c.index)
            delta = c.delta
            if self.first_token_at is None and delta is not None and (delta.content or delta.tool_calls):
                self.first_token_at = now
            if c.finish_reason is not None:
                if c.index in self.finished:
                    raise ValueError(f"choice {c.index} finished twice")
                self.finished[c.index] = c.finish_reason

    def problem(self) -> str | None:
        """Why this stream is not a complete answer (None: it is)."""
        if not self.started:
            return "the stream ended before any choice"
        unfinished = sorted(self.started - set(self.finished))
        if unfinished:
            return f"the stream ended without a finish_reason for choice(s) {unfinished}"
        if self.usage is None:
            return "the stream ended before its usage chunk (cut off)"
        return None

    def ttft_ms(self) -> float | None:
        """Time to first token: request sent -> first chunk with content or tool calls (None: none came)."""
        return None if self.first_token_at is None else (self.first_token_at - self.t0) * 1000


def streamed_request(client, body: dict, clock: Callable[[], float] = time.monotonic) -> dict:
    """One `stream: true` request through the official openai `client`, read to its end: a record with `start`,
    `stream`, `status` (200 only for a complete stream, `StreamTally.problem`; the HTTP status of a refused one;
    0 for a stream that errors, drops or is cut off), `error`, `ttft_ms` and the serving `version`/`arm`."""
    import openai

    t0 = clock()
    rec: dict = {"start": t0, "stream": True}
    tally = StreamTally(t0)
    try:
        stream = client.chat.completions.create(**body, stream=True, stream_options={"include_usage": True})
        with stream:
            for chunk in stream:
                tally.add(chunk, clock())
        problem = tally.problem()
        rec["status"] = 200 if problem is None else 0
        if problem:
            rec["error"] = problem
    except openai.APIStatusError as e:
        rec["status"], rec["error"] = e.status_code, str(e)[:300]
    except Exception as e:  # noqa: BLE001 -- a stream that errors or drops is a failed request
        rec["status"], rec["error"] = 0, f"{type(e).__name__}: {e}"[:300]
    if tally.version:
        rec["version"], rec["arm"] = tally.version, tally.arm
    rec["ttft_ms"] = tally.ttft_ms()
    return rec


class Clients:
    """`n` threads sending chat requests in a loop; every outcome is recorded with its time. The first
    `streaming` of them send `stream: true` through the official openai client and read each stream to its end
    (`StreamTally` judges it); the others post plain JSON bodies."""

    def __init__(self, url: str, n: int, max_tokens: int, streaming: int = 0):
        self.url, self.n, self.max_tokens, self.streaming = url, n, max_tokens, streaming
        self.results: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run_streamed if k < streaming else self._run, args=(k,),
                                          daemon=True) for k in range(n)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)

    def _body(self, k: int, i: int) -> dict:
        return {"model": "rtrl-policy", "user": f"bench-user-{k}-{i % 50}", "max_tokens": self.max_tokens,
                "messages": [{"role": "user", "content": f"please fix the retry bug in file {i}.py"}]}

    def _record(self, rec: dict) -> None:
        rec["end"] = time.monotonic()
        rec["latency_ms"] = (rec["end"] - rec["start"]) * 1000
        with self._lock:
            self.results.append(rec)

    def _run(self, k: int) -> None:
        import httpx

        with httpx.Client(timeout=120) as http:
            i = 0
            while not self._stop.is_set():
                rec = {"start": time.monotonic(), "stream": False}
                try:
                    r = http.post(f"{self.url}/v1/chat/completions", json=self._body(k, i))
                    rec["status"] = r.status_code
                    if r.status_code == 200:
                        b = r.json()
                        rec["version"], rec["arm"] = b["policy_version"], b["arm"]
                    else:
                        rec["error"] = r.text[:300]
                except Exception as e:  # noqa: BLE001 -- a dropped connection is a failed request, counted
                    rec["status"], rec["error"] = 0, f"{type(e).__name__}: {e}"
                self._record(rec)
                i += 1

    def _run_streamed(self, k: int) -> None:
        import openai

        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="bench", max_retries=0, timeout=120)
        try:
            i = 0
            while not self._stop.is_set():
                self._record(streamed_request(client, self._body(k, i)))
                i += 1
        finally:
            client.close()

    def window(self, t0: float, t1: float) -> list[dict]:
        """Requests that were in flight at some point in [t0, t1]."""
        with self._lock:
            return [r for r in self.results if r["end"] >= t0 and r["start"] <= t1]


def by_kind(records: list[dict]) -> dict:
    """Streamed and non-streamed requests apart: counts, failures and latencies (ms; p50/p95 of the answered
    ones); for streamed ones also the time to first token."""
    out = {}
    for kind, streamed in (("streamed", True), ("non_streamed", False)):
        rs = [r for r in records if bool(r.get("stream")) is streamed]
        ok = [r for r in rs if r["status"] == 200]
        lat = [r["latency_ms"] for r in ok]
        d = {"requests": len(rs), "failed": len(rs) - len(ok), "p50_latency_ms": _round(_pct(lat, 0.5)),
             "p95_latency_ms": _round(_pct(lat, 0.95))}
        if streamed:
            ttft = [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None]
            d |= {"p50_ttft_ms": _round(_pct(ttft, 0.5)), "p95_ttft_ms": _round(_pct(ttft, 0.95))}
        out[kind] = d
    return out


def _round(x: float) -> float | None:
    return None if x != x else round(x, 1)  # NaN (no values) -> None: JSON has no NaN


def health(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def start_gateway(cfg, overrides: list[str], log) -> str:
    """`rtrl serve --detach` (its own process) with `overrides`; returns its URL once it serves."""
    import subprocess

    from serving.server import url_of

    argv = rtrl_argv("serve", "--detach", overrides=overrides)
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=cfg.serving.startup_timeout_s + 60)
    if out.returncode != 0:
        raise RuntimeError(f"rtrl serve --detach failed:\n{out.stdout}\n{out.stderr}")
    url = url_of(cfg.serving)
    log(f"gateway: up in {time.monotonic() - t0:.1f}s at {url}")
    return url


def stop_gateway(cfg) -> None:
    from infra.stack.process import ManagedProcess

    ManagedProcess("serving", cfg.state_path).stop(timeout_s=30)


def swap_under_load(cfg, url: str, registry, new: str, load: "Clients", log) -> dict:
    """Move alias `champion` to `new` while `load` keeps sending, wait for the gateway's swap record to say the
    swap is over (the old engine shut down, or an in-place reload done), keep the load on 2 s more and stop it:
    {record, during (requests in flight at some point of the swap), t_move, first_new (first answer from `new`)}."""
    t_move = time.monotonic()
    registry.set_alias("champion", new)
    log(f"swap: alias champion moved to v{new} under load")
    record = None
    deadline = t_move + cfg.serving.startup_timeout_s + cfg.serving.drain_timeout_s
    while time.monotonic() < deadline:
        h = health(url) or {}
        record = next((s for s in h.get("swaps", []) if s["to_version"] == new), None)
        if record and (record.get("old_engine_shut_down") or record.get("reload_s") is not None):
            break
        time.sleep(0.2)
    time.sleep(2.0)  # keep the load on after the swap is over
    t_done = time.monotonic()
    load.stop()
    during = load.window(t_move, t_done)
    failed = [r for r in during if r["status"] != 200]
    first_new = min((r["end"] for r in load.results if r.get("version") == new), default=None)
    log(f"swap: {len(during)} requests during the swap, {len(failed)} failed; record {record}")
    return {"record": record, "during": during, "t_move": t_move, "first_new": first_new}


def steady_phase(load: "Clients", steady_s: float) -> tuple[list[dict], float]:
    """(requests that started and ended within the next `steady_s` seconds (after 3 s of warm-up), the seconds
    that window really lasted)."""
    time.sleep(3.0)  # first requests warm up the engines
    steady_from = time.monotonic()
    time.sleep(steady_s)
    steady_to = time.monotonic()
    return ([r for r in load.window(steady_from, steady_to) if r["start"] >= steady_from and r["end"] <= steady_to],
            steady_to - steady_from)


def gateway_stage(cfg, overrides: list[str], registry, versions: list[str], clients: int, max_tokens: int,
                  steady_s: float, log, stream_share: float = 0.5) -> dict:
    url = start_gateway(cfg, overrides, log)
    streaming = stream_clients(clients, stream_share)
    load = Clients(url, clients, max_tokens, streaming=streaming)
    log(f"gateway: {clients} clients, {streaming} of them streaming")
    try:
        load.start()
        steady, window_s = steady_phase(load, steady_s)
        ok = [r["latency_ms"] for r in steady if r["status"] == 200]
        log(f"gateway: steady phase {len(steady)} requests, p50 {_pct(ok, 0.5):.0f} ms, p95 {_pct(ok, 0.95):.0f} ms")
        new = versions[2]
        swap = swap_under_load(cfg, url, registry, new, load, log)
        record, during = swap["record"], swap["during"]
        failed = [r for r in during if r["status"] != 200]
        after_ok = [r["latency_ms"] for r in during if r["status"] == 200]
        status = health(url) or {}
        steady_kinds, swap_kinds = by_kind(steady), by_kind(during)
        log(f"gateway: steady {steady_kinds}; during the swap {swap_kinds}")
        return {
            "p50_latency_ms": round(_pct(ok, 0.5), 1), "p95_latency_ms": round(_pct(ok, 0.95), 1),
            "steady_requests": len(steady), "steady_requests_per_s": round(len(steady) / window_s, 2),
            "swap_seconds": round(swap["first_new"] - swap["t_move"], 2) if swap["first_new"] else None,
            "swap_load_seconds": record and record["load_s"], "swap_drain_seconds": record and record["drain_s"],
            "old_engine_shut_down": bool(record and record["old_engine_shut_down"]),
            "requests_during_swap": len(during), "failed_requests_during_swap": len(failed),
            "failed_examples": [r.get("error", "") for r in failed[:3]],
            "p95_latency_ms_during_swap": round(_pct(after_ok, 0.95), 1),
            "versions_served_during_swap": sorted({r["version"] for r in during if "version" in r}),
            "failed_requests_total": sum(r["status"] != 200 for r in load.results),
            "requests_total": len(load.results),
            "trajectories_sent": (status.get("telemetry") or {}).get("sent"),
            "stream_share": stream_share, "streaming_clients": streaming,
            "steady_by_kind": steady_kinds, "swap_by_kind": swap_kinds,
            "failed_streamed_requests_during_swap": swap_kinds["streamed"]["failed"],
            "streamed_requests_during_swap": swap_kinds["streamed"]["requests"],
        }
    finally:
        load.stop()
        stop_gateway(cfg)


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# On a GPU the engines run as serving runs there (the [serving] docs: bfloat16, CUDA graphs), and HF generate
# gets the same dtype; KV cache is sized for the batch, not the CPU default.
GPU_OVERRIDES = ["serving.dtype=\"bfloat16\"", "serving.enforce_eager=false", "serving.kv_cache_gb=8"]


def throughput_stage(cfg, folder: Path, batch: int, prompt_tokens: int, new_tokens: int, log) -> dict:
    """Stages 1-2 on `folder`: HF generate vs the serving engine, same prompts, lengths, sampling and dtype."""
    device = "cuda" if _gpu() else "cpu"
    prompts = _prompts(folder, batch, prompt_tokens)
    hf_dtype = "float32" if cfg.serving.dtype == "auto" else cfg.serving.dtype
    hf_by_threads = hf_generate_tokens_per_s(folder, prompts, new_tokens, log, device=device, dtype=hf_dtype)
    hf = max(hf_by_threads.values())
    vllm, load_s = vllm_tokens_per_s(folder, prompts, new_tokens, cfg.serving, log)
    return {"device": _device_name(), "dtype": hf_dtype, "enforce_eager": cfg.serving.enforce_eager,
            "vllm_tokens_per_s": round(vllm, 1), "hf_generate_tokens_per_s": round(hf, 1),
            "hf_generate_tokens_per_s_by_threads": {str(k): round(v, 1) for k, v in hf_by_threads.items()},
            "vllm_vs_hf": round(vllm / hf, 2), "engine_load_seconds": round(load_s, 1)}


def _device_name() -> str:
    import platform

    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"cpu ({platform.machine()}, " \
        f"{os.cpu_count()} cores)"


def run(batch: int = 32, prompt_tokens: int = 64, new_tokens: int = 128, clients: int = 8, steady_s: float = 15.0,
        log: Callable[[str], None] = print, gateway: bool = True, shape: str = "default",
        stream_share: float = 0.5) -> dict:
    """Every stage; `gateway=False` runs only the throughput comparison (no broker, no MLflow: for a GPU machine
    that has neither)."""
    from infra.config import load_config
    from serving.testing import make_tiny_checkpoint

    from infra.bench.quiet import quiet_libraries

    quiet_libraries()   # in this process (the gateway process logs to its own file)
    load_at_start = round(os.getloadavg()[0], 2)  # other work on the machine skews every figure below
    tmp = Path(tempfile.mkdtemp(prefix="rtrl-bench-serving-"))
    overrides = [f'state_dir="{tmp}"', f"kafka.port={free_port(pair=True)}", f"collector.port={free_port()}",
                 f"mlflow.ui_port={free_port()}", f"serving.port={free_port()}", "serving.registry_poll_s=0.5"]
    overrides += GPU_OVERRIDES if _gpu() else []
    cfg = load_config(None, overrides)
    model = SHAPES[shape]
    result = {"model": f"random-init Llama, shape {shape} (" + ", ".join(
                  f"{k} {v}" for k, v in model.items()) + ")", "batch": batch,
              "prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "load_average_at_start": load_at_start}
    try:
        # seed 0: the weights of version 1 below (the gateway's control arm)
        folder = make_tiny_checkpoint(tmp / "ckpt0", seed=0, **model)
        result |= throughput_stage(cfg, folder, batch, prompt_tokens, new_tokens, log)
        if gateway:
            result |= {"clients": clients, **_gateway_with_stack(cfg, overrides, tmp, clients, new_tokens,
                                                                steady_s, log, stream_share)}
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tiny_versions(cfg, tmp: Path, count: int, bench: str, log) -> tuple:
    """`count` tiny checkpoints of the default shape (seeds 0, 1, ...) registered as versions; alias control on the
    first, champion on the second. (the registry, the versions)."""
    from registry.client import Registry
    from serving.testing import make_tiny_checkpoint

    registry = Registry.from_config(cfg)
    versions = [registry.register(make_tiny_checkpoint(tmp / f"ckpt{s}", seed=s, **MODEL), tags={"bench": bench},
                                  log=log) for s in range(count)]
    registry.set_alias("control", versions[0])
    registry.set_alias("champion", versions[1])
    return registry, versions


def _gateway_with_stack(cfg, overrides: list[str], tmp: Path, clients: int, new_tokens: int, steady_s: float,
                        log, stream_share: float = 0.5) -> dict:
    """A private stack and registry with versions 1-3 (seeds 0-2), the gateway stage, then the swap by delta
    (infra/bench/serving_delta.py: v4, v3's child)."""
    from infra.bench.serving_delta import delta_swap_stage
    from infra.stack.stack import Stack
    from serving.testing import make_child_checkpoint

    stack = Stack(cfg)
    try:
        log(f"bench: private stack and registry in {tmp}")
        stack.up(log=lambda *_: None)
        registry, versions = tiny_versions(cfg, tmp, 3, "serving", log)
        result = gateway_stage(cfg, overrides, registry, versions, clients, new_tokens, steady_s, log, stream_share)
        child = make_child_checkpoint(tmp / "ckpt2", tmp / "ckpt2-child", seed=3)
        result["delta_swap"] = delta_swap_stage(cfg, overrides, registry, versions[2], child, clients, new_tokens,
                                                DELTA_STEADY_S, log, stream_share)
        return result
    finally:
        stack.down(log=lambda *_: None)


if __name__ == "__main__":  # vLLM spawns processes: this module may be run directly too
    print(json.dumps(run(log=lambda m: print(m, file=sys.stderr))))
