"""vLLM's own engine statistics as the gateway exposes them: each report of an engine's scheduler and iterations
accumulates into its EngineStats, and each engine is one labelled series under vLLM's metric names."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from schemas.prometheus import parse_samples
from serving.vllm_stats import EngineStats, families
from tests.prometheus_text import value


def scheduler(running: int, waiting: int, usage: float, queries: int = 0, hits: int = 0):
    return SimpleNamespace(num_running_reqs=running, num_waiting_reqs=waiting, kv_cache_usage=usage,
                           prefix_cache_stats=SimpleNamespace(queries=queries, hits=hits))


def iteration(prompt: int, generated: int, preempted: int = 0):
    return SimpleNamespace(num_prompt_tokens=prompt, num_generation_tokens=generated, num_preempted_reqs=preempted)


class Families:
    def __init__(self, engines):
        self.engines = engines

    def collect(self):
        return families(self.engines)


def test_reports_accumulate_per_engine_and_are_exposed_under_vllms_names():
    a, b = EngineStats(), EngineStats()
    a.record(scheduler(2, 1, 0.25, queries=100, hits=40), iteration(100, 5))
    a.record(scheduler(1, 0, 0.5), iteration(0, 7, preempted=1))
    b.record(None, iteration(30, 3))
    registry = CollectorRegistry()
    registry.register(Families([("rtrl/v2", "0", a), ("rtrl/v3", "1", b)]))
    m = parse_samples(generate_latest(registry).decode())
    one = {"model_name": "rtrl/v2", "engine": "0"}
    assert value(m, "vllm:num_requests_running", **one) == 1 and value(m, "vllm:num_requests_waiting", **one) == 0
    assert value(m, "vllm:kv_cache_usage_perc", **one) == 0.5                 # the newest report
    assert value(m, "vllm:prompt_tokens_total", **one) == 100
    assert value(m, "vllm:generation_tokens_total", **one) == 12              # summed over reports
    assert value(m, "vllm:num_preemptions_total", **one) == 1
    assert value(m, "vllm:prefix_cache_queries_total", **one) == 100
    assert value(m, "vllm:prefix_cache_hits_total", **one) == 40
    assert value(m, "vllm:generation_tokens_total", model_name="rtrl/v3", engine="1") == 3
    assert value(m, "vllm:num_requests_running", model_name="rtrl/v3", engine="1") == 0   # no scheduler report yet
