"""`[serving]` → a vLLM engine's arguments and its processes' environment, per device (pure: vLLM is not imported).

    kwargs = engine_kwargs(folder, cfg, "cuda", lora=True)   # AsyncEngineArgs(**kwargs) (serving/engine.py)
    env = engine_env(cfg, "cuda", devices="2,3")             # {"CUDA_VISIBLE_DEVICES": "2,3", ...}; None = unset
    for line in ignored_knobs(cfg, "cuda"): log.info(line)   # "serving.cpu_cores is CPU-only: ignored on cuda"

Both devices share the model, dtype, context length, batch size, seed, eager mode, LoRA settings and the behaviour
log-probs (`processed_logprobs`). On CPU (vLLM's CPU build) the KV cache is `kv_cache_gb` exactly, whole prompts are
prefilled at once (vLLM 0.32 CPU kills a seeded request whose prefill is split in chunks), and `busy_poll_ms` picks
rtrl's executor. On GPUs `tensor_parallel_size` shards the model and `gpu_memory_utilization` (the arm's, else
serving's) bounds the engine's memory, the KV cache being what is left after weights and activations; the CPU-only
knobs do nothing there, and `ignored_knobs` says which are set.

An engine's processes inherit the environment of the process that starts them (serving/engine.py sets `engine_env`
under a lock for the engine's start): on GPUs `CUDA_VISIBLE_DEVICES` places an arm's engine on its devices.
"""

from __future__ import annotations

from serving.config import ServingConfig

GiB = 1 << 30
RELOAD_EXTENSION = "serving.vllm_reload.InPlaceReload"   # `reload` runs its rtrl_reload_weights in the worker
BUSY_POLL_EXECUTOR = "serving.vllm_idle.BusyPollExecutor"  # serving.busy_poll_ms > 0 (CPU): the engine's executor
BUSY_POLL_ENV = "RTRL_VLLM_BUSY_POLL_MS"                 # serving.vllm_idle.ENV
CPU_ONLY = ("cpu_cores", "spare_engines", "spare_cpu_cores", "busy_poll_ms", "kv_cache_gb")


def is_gpu(device: str) -> bool:
    return device != "cpu"


def engine_kwargs(folder, cfg: ServingConfig, device: str, *, lora: bool = False) -> dict:
    """vLLM `AsyncEngineArgs` keyword arguments for the checkpoint in `folder` on `device` ("cpu", "cuda", ...).
    `lora`: the engine serves adapters (LoRA on whatever `cfg.enable_lora` says)."""
    kw = dict(model=str(folder), tokenizer=str(folder), dtype=cfg.dtype, max_model_len=cfg.max_model_len,
              logprobs_mode="processed_logprobs", enforce_eager=cfg.enforce_eager, max_num_seqs=cfg.max_num_seqs,
              seed=cfg.seed, tensor_parallel_size=cfg.tensor_parallel_size,
              generation_config="vllm",  # the checkpoint's generation_config.json must not change the sampling
              worker_extension_cls=RELOAD_EXTENSION, disable_log_stats=True)
    if lora or cfg.enable_lora:
        kw.update(enable_lora=True, max_loras=cfg.max_loras, max_lora_rank=cfg.max_lora_rank)
    if is_gpu(device):
        kw.update(gpu_memory_utilization=cfg.gpu_memory_utilization)
        return kw
    kw.update(kv_cache_memory_bytes=int(cfg.kv_cache_gb * GiB),
              enable_chunked_prefill=False, max_num_batched_tokens=max(2048, cfg.max_model_len))
    if cfg.busy_poll_ms:
        kw["distributed_executor_backend"] = BUSY_POLL_EXECUTOR
    return kw


def engine_env(cfg: ServingConfig, device: str, devices: str = "") -> dict[str, str | None]:
    """The environment variables an engine's processes need (None: unset it). GPU: `CUDA_VISIBLE_DEVICES` when the
    arm names its `devices` (else inherited), no busy-poll patch. CPU: the KV-cache size in whole GiB (vLLM CPU's
    own variable overrides `kv_cache_memory_bytes`, so it is set only when the size is whole), the cores the
    worker's threads bind to, the busy-poll window (read by serving.vllm_idle in the engine's processes)."""
    if is_gpu(device):
        return {**({"CUDA_VISIBLE_DEVICES": devices} if devices else {}), BUSY_POLL_ENV: None}
    kv = cfg.kv_cache_gb
    return {"VLLM_CPU_KVCACHE_SPACE": str(int(kv)) if float(kv).is_integer() else None,
            "VLLM_CPU_OMP_THREADS_BIND": cfg.cpu_cores or "auto",
            BUSY_POLL_ENV: f"{cfg.busy_poll_ms:g}" if cfg.busy_poll_ms else None}


def ignored_knobs(cfg: ServingConfig, device: str, devices: str = "") -> list[str]:
    """One line per knob that is set (differs from its default) but does nothing on `device`."""
    if not is_gpu(device):
        return [f"serving.arms[].devices ({devices!r}) is GPU-only: ignored on {device}"] if devices else []
    fields = type(cfg).model_fields
    return [f"serving.{name} is CPU-only: ignored on {device}"
            for name in CPU_ONLY if getattr(cfg, name) != fields[name].default]
