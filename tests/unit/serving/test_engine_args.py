"""serving/engine_args.py: `[serving]` → vLLM's engine arguments and its processes' environment, on CPU and on GPUs
(the GPU mapping is a function of the device name, so it is tested here without a GPU); the CPU-only knobs that a
GPU engine ignores, named; and the per-arm placement rules of serving/config.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serving.config import ArmConfig, ServingConfig
from serving.engine_args import BUSY_POLL_EXECUTOR, GiB, RELOAD_EXTENSION, engine_env, engine_kwargs, ignored_knobs

GPU = dict(tensor_parallel_size=2, gpu_memory_utilization=0.45, dtype="bfloat16", enforce_eager=False,
           max_model_len=8192, max_num_seqs=64)


def test_the_cpu_mapping_sizes_the_kv_cache_exactly_and_prefills_whole_prompts():
    kw = engine_kwargs("/ckpt", ServingConfig(kv_cache_gb=1.5, max_model_len=4096, busy_poll_ms=5), "cpu")
    assert kw["kv_cache_memory_bytes"] == int(1.5 * GiB)
    assert (kw["enable_chunked_prefill"], kw["max_num_batched_tokens"]) == (False, 4096)
    assert kw["distributed_executor_backend"] == BUSY_POLL_EXECUTOR
    assert (kw["model"], kw["tokenizer"], kw["dtype"], kw["logprobs_mode"]) == ("/ckpt", "/ckpt", "float32",
                                                                                 "processed_logprobs")
    assert kw["worker_extension_cls"] == RELOAD_EXTENSION and kw["generation_config"] == "vllm"
    assert "gpu_memory_utilization" not in kw and "enable_lora" not in kw


def test_the_gpu_mapping_shards_and_bounds_memory_by_share_and_drops_every_cpu_knob():
    cfg = ServingConfig(**GPU, kv_cache_gb=3, busy_poll_ms=5, cpu_cores="0-3")
    kw = engine_kwargs("/ckpt", cfg, "cuda")
    assert (kw["tensor_parallel_size"], kw["gpu_memory_utilization"], kw["dtype"], kw["enforce_eager"],
            kw["max_model_len"], kw["max_num_seqs"]) == (2, 0.45, "bfloat16", False, 8192, 64)
    # the KV cache is what the share leaves (kv_cache_memory_bytes would override gpu_memory_utilization)
    for cpu_only in ("kv_cache_memory_bytes", "distributed_executor_backend", "enable_chunked_prefill",
                     "max_num_batched_tokens"):
        assert cpu_only not in kw
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["worker_extension_cls"] == RELOAD_EXTENSION


def test_lora_settings_reach_an_engine_that_serves_adapters_or_every_engine_when_enabled():
    cfg = ServingConfig(max_loras=3, max_lora_rank=32)
    assert "enable_lora" not in engine_kwargs("/b", cfg, "cuda")
    for kw in (engine_kwargs("/b", cfg, "cuda", lora=True), engine_kwargs("/b", cfg, "cpu", lora=True),
               engine_kwargs("/b", cfg.model_copy(update={"enable_lora": True}), "cpu")):
        assert (kw["enable_lora"], kw["max_loras"], kw["max_lora_rank"]) == (True, 3, 32)
    with pytest.raises(ValidationError, match="max_lora_rank must be one of"):
        ServingConfig(max_lora_rank=12)


@pytest.mark.integration      # importing vLLM starts a process (its platform probe)
def test_every_mapped_argument_is_one_vllm_accepts():
    from vllm.engine.arg_utils import AsyncEngineArgs

    for device in ("cpu", "cuda"):
        args = AsyncEngineArgs(**engine_kwargs("/ckpt", ServingConfig(**GPU, busy_poll_ms=5), device, lora=True))
        assert args.tensor_parallel_size == 2 and args.enable_lora


def test_a_gpu_engine_sees_its_arms_devices_and_no_cpu_variables():
    cfg = ServingConfig(cpu_cores="0", busy_poll_ms=5, kv_cache_gb=2)
    assert engine_env(cfg, "cuda", "2,3") == {"CUDA_VISIBLE_DEVICES": "2,3", "RTRL_VLLM_BUSY_POLL_MS": None}
    assert engine_env(cfg, "cuda") == {"RTRL_VLLM_BUSY_POLL_MS": None}   # inherited devices
    assert engine_env(cfg, "cpu", "2,3") == {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_CPU_OMP_THREADS_BIND": "0",
                                             "RTRL_VLLM_BUSY_POLL_MS": "5"}
    assert engine_env(ServingConfig(kv_cache_gb=0.5), "cpu")["VLLM_CPU_KVCACHE_SPACE"] is None   # not whole GiB


def test_cpu_only_knobs_set_on_a_gpu_are_named_as_ignored_and_gpu_devices_on_cpu_too():
    assert ignored_knobs(ServingConfig(), "cuda") == []
    cfg = ServingConfig(cpu_cores="0-3", spare_engines=1, busy_poll_ms=5, kv_cache_gb=4)
    assert ignored_knobs(cfg, "cuda") == ["serving.cpu_cores is CPU-only: ignored on cuda",
                                          "serving.spare_engines is CPU-only: ignored on cuda",
                                          "serving.busy_poll_ms is CPU-only: ignored on cuda",
                                          "serving.kv_cache_gb is CPU-only: ignored on cuda"]
    assert ignored_knobs(cfg, "cpu") == []
    assert ignored_knobs(cfg, "cpu", "0") == ["serving.arms[].devices ('0') is GPU-only: ignored on cpu"]


def test_a_vllm_engine_start_logs_each_ignored_cpu_knob_once(monkeypatch, caplog):
    """VllmEngine.load logs ignored_knobs before it starts the engine (the start itself is stopped here)."""
    import logging

    import serving.engine as engine

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr(engine, "platform_device", lambda: "cuda")
    monkeypatch.setattr(engine, "chat_tokenizer", stop)
    with caplog.at_level(logging.INFO, logger="rtrl.serving.engine"), pytest.raises(Stop):
        engine.VllmEngine.load("1", "/ckpt", ServingConfig(cpu_cores="1"))
    assert [r.getMessage() for r in caplog.records] == ["serving.cpu_cores is CPU-only: ignored on cuda"]


def arms(*specs) -> list[ArmConfig]:
    return [ArmConfig(name=f"a{i}", alias=alias, share=1 / len(specs), **kw) for i, (alias, kw) in enumerate(specs)]


def test_an_arm_names_one_device_per_tensor_parallel_shard():
    ServingConfig(tensor_parallel_size=2, arms=arms(("x", {"devices": "0,1"}), ("y", {"devices": "2,3"})))
    with pytest.raises(ValidationError, match="names 1 devices but tensor_parallel_size is 2"):
        ServingConfig(tensor_parallel_size=2, arms=arms(("x", {"devices": "0"}), ("y", {"devices": "2,3"})))
    with pytest.raises(ValidationError, match="names a device twice"):
        ArmConfig(name="a", alias="x", share=1, devices="1,1")
    with pytest.raises(ValidationError):
        ArmConfig(name="a", alias="x", share=1, devices="cuda:0")


def test_two_engines_share_a_device_only_within_its_memory():
    with pytest.raises(ValidationError, match="device 0 holds the engines of arms a0 0.9, a1 0.9"):
        ServingConfig(arms=arms(("x", {"devices": "0"}), ("y", {"devices": "0"})))
    ServingConfig(arms=arms(("x", {"devices": "0", "gpu_memory_utilization": 0.45}),
                            ("y", {"devices": "0", "gpu_memory_utilization": 0.45})))
    ServingConfig(gpu_memory_utilization=0.5, arms=arms(("x", {"devices": "0"}), ("y", {"devices": "0"})))
    # arms of one alias share one engine: counted once
    ServingConfig(arms=arms(("x", {"devices": "0"}), ("x", {"devices": "0"})))
    with pytest.raises(ValidationError, match="same devices"):
        ServingConfig(arms=arms(("x", {"devices": "0"}), ("x", {"devices": "1"})))
