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
     get traffic) for a steady phase: `p50_latency_ms`, `p95_latency_ms` (client-side HTTP round trip).
     Then `champion` moves to v3 while the clients keep going: `swap_seconds` (alias moved → first answer from
     v3), `swap_load_seconds` (the gateway's own count: alias seen → v3 engine serving), `swap_drain_seconds`
     (v2's in-flight requests finished → v2 shut down), `failed_requests_during_swap` (target 0) and
     `requests_during_swap`.
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

    from serving.engine import VllmEngine

    async def run() -> tuple[float, float]:
        engine = await asyncio.to_thread(VllmEngine.load, "1", folder, serving_cfg)
        try:
            async def batch() -> tuple[int, float]:
                t0 = time.perf_counter()
                gens = await asyncio.gather(*[engine.generate(p, new_tokens, ignore_eos=True) for p in prompts])
                return sum(len(g.token_ids) for g in gens), time.perf_counter() - t0

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


class _Clients:
    """`n` threads sending chat requests in a loop; every outcome is recorded with its time."""

    def __init__(self, url: str, n: int, max_tokens: int):
        self.url, self.n, self.max_tokens = url, n, max_tokens
        self.results: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(n)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)

    def _run(self, k: int) -> None:
        import httpx

        with httpx.Client(timeout=120) as http:
            i = 0
            while not self._stop.is_set():
                body = {"model": "rtrl-policy", "user": f"bench-user-{k}-{i % 50}", "max_tokens": self.max_tokens,
                        "messages": [{"role": "user", "content": f"please fix the retry bug in file {i}.py"}]}
                t0 = time.monotonic()
                rec = {"start": t0}
                try:
                    r = http.post(f"{self.url}/v1/chat/completions", json=body)
                    rec["status"] = r.status_code
                    if r.status_code == 200:
                        b = r.json()
                        rec["version"], rec["arm"] = b["policy_version"], b["arm"]
                    else:
                        rec["error"] = r.text[:300]
                except Exception as e:  # noqa: BLE001 -- a dropped connection is a failed request, counted
                    rec["status"], rec["error"] = 0, f"{type(e).__name__}: {e}"
                rec["end"] = time.monotonic()
                rec["latency_ms"] = (rec["end"] - t0) * 1000
                with self._lock:
                    self.results.append(rec)
                i += 1

    def window(self, t0: float, t1: float) -> list[dict]:
        """Requests that were in flight at some point in [t0, t1]."""
        with self._lock:
            return [r for r in self.results if r["end"] >= t0 and r["start"] <= t1]


def _health(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def gateway_stage(cfg, overrides: list[str], registry, versions: list[str], clients: int, max_tokens: int,
                  steady_s: float, log) -> dict:
    import subprocess

    from infra.stack.process import ManagedProcess
    from serving.server import url_of

    url = url_of(cfg.serving)
    argv = rtrl_argv("serve", "--detach", overrides=overrides)
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=cfg.serving.startup_timeout_s + 60)
    if out.returncode != 0:
        raise RuntimeError(f"rtrl serve --detach failed:\n{out.stdout}\n{out.stderr}")
    log(f"gateway: up in {time.monotonic() - t0:.1f}s (2 engines) at {url}")
    load = _Clients(url, clients, max_tokens)
    try:
        load.start()
        time.sleep(3.0)  # first requests warm up the engines
        steady_from = time.monotonic()
        time.sleep(steady_s)
        steady_to = time.monotonic()
        steady = [r for r in load.window(steady_from, steady_to) if r["start"] >= steady_from and r["end"] <= steady_to]
        ok = [r["latency_ms"] for r in steady if r["status"] == 200]
        log(f"gateway: steady phase {len(steady)} requests, p50 {_pct(ok, 0.5):.0f} ms, p95 {_pct(ok, 0.95):.0f} ms")

        old, new = versions[1], versions[2]
        t_move = time.monotonic()
        registry.set_alias("champion", new)
        log(f"swap: alias champion moved v{old} -> v{new} under load")
        record = None
        deadline = t_move + cfg.serving.startup_timeout_s + cfg.serving.drain_timeout_s
        while time.monotonic() < deadline:
            h = _health(url) or {}
            record = next((s for s in h.get("swaps", []) if s["to_version"] == new), None)
            if record and record.get("old_engine_shut_down"):
                break
            time.sleep(0.2)
        time.sleep(2.0)  # keep the load on after the old engine is gone
        t_done = time.monotonic()
        load.stop()
        during = load.window(t_move, t_done)
        failed = [r for r in during if r["status"] != 200]
        first_new = min((r["end"] for r in load.results if r.get("version") == new), default=None)
        after_ok = [r["latency_ms"] for r in during if r["status"] == 200]
        health = _health(url) or {}
        log(f"swap: {len(during)} requests during the swap, {len(failed)} failed; record {record}")
        return {
            "p50_latency_ms": round(_pct(ok, 0.5), 1), "p95_latency_ms": round(_pct(ok, 0.95), 1),
            "steady_requests": len(steady), "steady_requests_per_s": round(len(steady) / (steady_to - steady_from), 2),
            "swap_seconds": round(first_new - t_move, 2) if first_new else None,
            "swap_load_seconds": record and record["load_s"], "swap_drain_seconds": record and record["drain_s"],
            "old_engine_shut_down": bool(record and record["old_engine_shut_down"]),
            "requests_during_swap": len(during), "failed_requests_during_swap": len(failed),
            "failed_examples": [r.get("error", "") for r in failed[:3]],
            "p95_latency_ms_during_swap": round(_pct(after_ok, 0.95), 1),
            "versions_served_during_swap": sorted({r["version"] for r in during if "version" in r}),
            "failed_requests_total": sum(r["status"] != 200 for r in load.results),
            "requests_total": len(load.results),
            "trajectories_sent": (health.get("telemetry") or {}).get("sent"),
        }
    finally:
        load.stop()
        ManagedProcess("serving", cfg.state_path).stop(timeout_s=30)


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
        log: Callable[[str], None] = print, gateway: bool = True, shape: str = "default") -> dict:
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
                                                                steady_s, log)}
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _gateway_with_stack(cfg, overrides: list[str], tmp: Path, clients: int, new_tokens: int, steady_s: float,
                        log) -> dict:
    """A private stack and registry with versions 1-3 (seeds 0-2), then the gateway stage."""
    from registry.client import Registry
    from infra.stack.stack import Stack
    from serving.testing import make_tiny_checkpoint

    stack = Stack(cfg)
    try:
        log(f"bench: private stack and registry in {tmp}")
        stack.up(log=lambda *_: None)
        registry = Registry.from_config(cfg)
        versions = [registry.register(make_tiny_checkpoint(tmp / f"ckpt{s}", seed=s, **MODEL),
                                      tags={"bench": "serving"}) for s in range(3)]
        registry.set_alias("control", versions[0])
        registry.set_alias("champion", versions[1])
        return gateway_stage(cfg, overrides, registry, versions, clients, new_tokens, steady_s, log)
    finally:
        stack.down(log=lambda *_: None)


if __name__ == "__main__":  # vLLM spawns processes: this module may be run directly too
    print(json.dumps(run(log=lambda m: print(m, file=sys.stderr))))
