"""Letting rtrl's own vLLM engines sleep between requests (`serving.busy_poll_ms`; off by default).

vLLM's multiprocess executor (the only one its CPU build runs) passes each step's input to the worker process, and
the output back, through shared-memory queues whose reader busy-polls (`sched_yield` in a loop) for one second
after every read before it falls back to waiting on a ZeroMQ wake-up that the writer sends with every write.
Under steady traffic (a request more often than once a second) the worker and the engine core therefore never
sleep: one engine serving 2 requests/s holds ~1.5 cores of a 2-core machine, which starves a trainer or a gate
running beside it.

`register()` shortens that busy window, in the process it runs in, to `RTRL_VLLM_BUSY_POLL_MS` (unset = vLLM's own
behaviour). Within a generation the next step's input arrives well inside a few milliseconds, so batching and
throughput keep the spin; between requests the reader blocks on the wake-up, which the writer sends on every write,
so nothing is missed and the latency cost is one ZeroMQ wake-up (tens of microseconds).

It runs in rtrl's engines only, never as a vLLM plugin of the environment: with `serving.busy_poll_ms` > 0,
`serving.engine` sets the variable and starts the engine with `BusyPollExecutor` (vLLM's multiprocess executor,
given as the engine's `distributed_executor_backend`), which calls `register()` in the engine-core process before it
starts its workers, and in each worker once the workers are up (a collective RPC). Other vLLM programs in the same
environment keep vLLM's behaviour.
"""

from __future__ import annotations

import logging
import os

ENV = "RTRL_VLLM_BUSY_POLL_MS"
log = logging.getLogger("rtrl.serving.vllm_idle")


def register() -> None:
    """Shorten the busy-poll window of this process's shared-memory queue readers to RTRL_VLLM_BUSY_POLL_MS
    milliseconds (nothing when it is unset). Idempotent."""
    value = os.environ.get(ENV, "")
    if not value:
        return
    try:
        seconds = float(value) / 1000
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds; vLLM's busy polling is left as is", ENV, value)
        return
    try:
        from vllm.distributed.device_communicators.shm_broadcast import SpinCondition
    except ImportError:  # another vLLM layout: nothing to shorten
        log.warning("vLLM has no shm_broadcast.SpinCondition; %s has no effect", ENV)
        return
    original = getattr(SpinCondition.wait, "__rtrl_original__", SpinCondition.wait)

    def wait(self, timeout_ms=None):
        if self.is_reader and self.busy_loop_s > seconds:
            self.busy_loop_s = seconds
        return original(self, timeout_ms)

    wait.__rtrl_original__ = original
    SpinCondition.wait = wait


def _register_in_worker(worker) -> None:
    """`collective_rpc` target: `register()` in a worker process (`worker` is vLLM's worker object)."""
    register()


# vLLM is imported only where an engine runs: `serving.engine` names this class by its qualified name
from vllm.v1.executor.multiproc_executor import MultiprocExecutor  # noqa: E402


class BusyPollExecutor(MultiprocExecutor):
    """vLLM's multiprocess executor with `register()` applied in the engine-core process (which reads the workers'
    outputs) and in its workers (which read each step's input)."""

    def _init_executor(self) -> None:
        register()
        super()._init_executor()

    def _post_init_executor(self) -> None:
        super()._post_init_executor()
        self.collective_rpc(_register_in_worker)
