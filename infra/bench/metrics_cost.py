"""What metrics cost (`rtrl bench serving --metrics-cost`, `rtrl bench ingest --metrics-cost`): the same load with
the process's metrics off and on, in alternating rounds (off-on, on-off, ...) so drift on a shared machine and
the order fall on both; the ratio of the medians.

Serving: the gateway (`rtrl serve --detach`, a private stack and registry, a tiny model on both arms) under
`clients` closed-loop clients for `steady_s` per round, with `serving.metrics` false then true (the request
counters and histograms, and vLLM's own statistics). The collector: `collector.metrics` false then true, the
ingest benchmark's collector stage each round."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def alternate(measure: Callable[[bool], float], rounds: int, log) -> dict:
    """`measure(metrics_on)` in `rounds` rounds, off then on, then on then off (ABBA: neither side always goes
    first): each side's values, medians and on/off ratio."""
    values: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(rounds):
        for on in ((False, True) if i % 2 == 0 else (True, False)):
            v = measure(on)
            values["on" if on else "off"].append(round(v, 2))
            log(f"metrics cost: round {i + 1}/{rounds}, metrics {'on' if on else 'off'}: {v:.2f}/s")
    off, on = statistics.median(values["off"]), statistics.median(values["on"])
    return {"off_per_s": values["off"], "on_per_s": values["on"], "off_median": off, "on_median": on,
            "on_over_off": round(on / off, 3) if off else None}


def serving_cost(cfg, overrides: list[str], clients: int, max_tokens: int, steady_s: float, rounds: int,
                 log) -> dict:
    """Gateway requests/s (answered within the steady window) with serving.metrics off and on."""
    from infra.bench.serving import Clients, start_gateway, steady_phase, stop_gateway

    def measure(on: bool) -> float:
        url = start_gateway(cfg, [*overrides, f"serving.metrics={'true' if on else 'false'}"], log)
        load = Clients(url, clients, max_tokens)
        try:
            load.start()
            steady, window_s = steady_phase(load, steady_s)
        finally:
            load.stop()
            stop_gateway(cfg)
        return sum(r["status"] == 200 for r in steady) / window_s

    t0 = time.monotonic()
    out = alternate(measure, rounds, log)
    return {**out, "clients": clients, "steady_s": steady_s, "rounds": rounds,
            "seconds": round(time.monotonic() - t0, 1)}


def serving_run(clients: int = 8, new_tokens: int = 128, steady_s: float = 15.0, rounds: int = 3,
                log: Callable[[str], None] = print) -> dict:
    """`serving_cost` on a private stack and registry: the tiny default-shape model as v1 (control) and v2
    (champion), the gateway started fresh each round."""
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from infra.bench.ports import free_port
    from infra.bench.quiet import quiet_libraries
    from infra.bench.serving import GPU_OVERRIDES, _gpu, tiny_versions
    from infra.config import load_config
    from infra.stack.stack import Stack

    quiet_libraries()
    tmp = Path(tempfile.mkdtemp(prefix="rtrl-bench-metrics-cost-"))
    overrides = [f'state_dir="{tmp}"', f"kafka.port={free_port(pair=True)}", f"collector.port={free_port()}",
                 f"mlflow.ui_port={free_port()}", f"serving.port={free_port()}"]
    overrides += GPU_OVERRIDES if _gpu() else []
    cfg = load_config(None, overrides)
    stack = Stack(cfg)
    load_at_start = round(os.getloadavg()[0], 2)
    try:
        stack.up(log=lambda *_: None)
        tiny_versions(cfg, tmp, 2, "metrics-cost", log)
        return {"load_average_at_start": load_at_start, "new_tokens": new_tokens,
                **serving_cost(cfg, overrides, clients, new_tokens, steady_s, rounds, log)}
    finally:
        stack.down(log=lambda *_: None)
        shutil.rmtree(tmp, ignore_errors=True)
