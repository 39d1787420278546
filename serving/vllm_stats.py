"""vLLM's own engine statistics, per engine, for the gateway's `/metrics` (serving/metrics.py).

vLLM reports each engine's scheduler and iteration statistics to its stat loggers. Its Prometheus logger writes
them into prometheus-client's process-wide registry and unregisters every `vllm:` metric each time an engine
starts, so in a gateway that holds several engines (the arms, a spare, a staged candidate) only the newest would
be seen. Each engine here gets its own logger instead (`logger_class`), recording into an `EngineStats`; the
gateway exposes them under vLLM's metric names, labelled by the served model (`<model>/v<version>`) and engine:

    vllm:num_requests_running, vllm:num_requests_waiting     gauges: the scheduler's queues
    vllm:kv_cache_usage_perc                                 gauge: KV-cache blocks in use (1 = full)
    vllm:prompt_tokens_total, vllm:generation_tokens_total   counters: tokens prefilled and sampled
    vllm:num_preemptions_total                               counter: requests preempted (KV cache full)
    vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total   counters: prompt tokens looked up / found

The logger subclasses vLLM's PrometheusStatLogger only so that vLLM adds no global one beside it
(`StatLoggerManager` adds its own unless a custom logger is one); it writes nothing to the global registry."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, scheduler, iteration) -> None:
        """One report of vLLM's (a SchedulerStats and/or an IterationStats; either may be None)."""
        with self.lock:
            if scheduler is not None:
                self.running, self.waiting = scheduler.num_running_reqs, scheduler.num_waiting_reqs
                self.kv_cache_usage = float(scheduler.kv_cache_usage)
                prefix = getattr(scheduler, "prefix_cache_stats", None)
                if prefix is not None:
                    self.prefix_queries += prefix.queries
                    self.prefix_hits += prefix.hits
            if iteration is not None:
                self.prompt_tokens += iteration.num_prompt_tokens
                self.generation_tokens += iteration.num_generation_tokens
                self.preemptions += iteration.num_preempted_reqs

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return {"running": self.running, "waiting": self.waiting, "kv_cache_usage": self.kv_cache_usage,
                    "prompt_tokens": self.prompt_tokens, "generation_tokens": self.generation_tokens,
                    "preemptions": self.preemptions, "prefix_queries": self.prefix_queries,
                    "prefix_hits": self.prefix_hits}


def logger_class(stats: EngineStats):
    """A vLLM stat logger class (for `AsyncLLM.from_engine_args(..., stat_loggers=[it])`) recording into `stats`."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    class EngineStatsLogger(PrometheusStatLogger):
        def __init__(self, vllm_config, engine_indexes=None):   # noqa: D107 -- no global metrics: see the module
            self.engine_indexes = engine_indexes or [0]
            self.vllm_config = vllm_config

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
            stats.record(scheduler_stats, iteration_stats)

        def record_sleep_state(self, sleep: int = 0, level: int = 0):
            pass

        def record_admission_rejection(self, reason: str) -> None:
            pass

        def log_engine_initialized(self):
            pass

        def log(self):
            pass

    return EngineStatsLogger


GAUGES = (("vllm:num_requests_running", "running", "Requests the engine is sampling"),
          ("vllm:num_requests_waiting", "waiting", "Requests waiting for the engine's scheduler"),
          ("vllm:kv_cache_usage_perc", "kv_cache_usage", "KV-cache usage (1 = every block in use)"))
COUNTERS = (("vllm:prompt_tokens", "prompt_tokens", "Prompt tokens prefilled"),
            ("vllm:generation_tokens", "generation_tokens", "Tokens sampled"),
            ("vllm:num_preemptions", "preemptions", "Requests preempted (the KV cache was full)"),
            ("vllm:prefix_cache_queries", "prefix_queries", "Prompt tokens looked up in the prefix cache"),
            ("vllm:prefix_cache_hits", "prefix_hits", "Prompt tokens found in the prefix cache"))


def families(engines: list[tuple[str, str, EngineStats]]):
    """The metric families over `engines`: (model_name, engine, stats) each."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    snaps = [(model, engine, s.snapshot()) for model, engine, s in engines]
    for name, key, help_ in GAUGES:
        g = GaugeMetricFamily(name, help_, labels=["model_name", "engine"])
        for model, engine, snap in snaps:
            g.add_metric([model, engine], float(snap[key]))
        yield g
    for name, key, help_ in COUNTERS:
        c = CounterMetricFamily(name, help_, labels=["model_name", "engine"])
        for model, engine, snap in snaps:
            c.add_metric([model, engine], float(snap[key]))
        yield c
