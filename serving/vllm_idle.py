"""A vLLM general plugin that lets an engine's processes sleep between requests (`serving.busy_poll_ms`).

vLLM's multiprocess executor (the only one its CPU build runs) passes each step's input to the worker process, and
the output back, through shared-memory queues whose reader busy-polls (`sched_yield` in a loop) for one second
after every read before it falls back to waiting on a ZeroMQ wake-up that the writer sends with every write.
Under steady traffic (a request more often than once a second) the worker and the engine core therefore never
sleep: measured on this 2-core machine, one engine serving 2 requests/s held ~1.5 cores, which starved the
trainer and the gate running beside it.

The plugin shortens that busy window to `RTRL_VLLM_BUSY_POLL_MS` (set by `serving.engine` from the config before
an engine spawns its processes; unset = vLLM's own behaviour). Within a generation the next step's input arrives
well inside a few milliseconds, so batching and throughput keep the spin; between requests the reader blocks on
the wake-up, which the writer sends on every write, so nothing is missed and the latency cost is one ZeroMQ
wake-up (tens of microseconds). vLLM loads general plugins in every engine-core and worker process
(`vllm.plugins.load_general_plugins`); registered in pyproject.toml under `vllm.general_plugins`.
"""

from __future__ import annotations

import logging
import os

ENV = "RTRL_VLLM_BUSY_POLL_MS"
log = logging.getLogger("rtrl.serving.vllm_idle")


def register() -> None:
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
