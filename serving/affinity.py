"""Moving a running vLLM CPU engine to other cores (Linux): every thread of its worker processes gets the new
affinity.

vLLM's CPU worker pins each of its OpenMP threads to a core of `VLLM_CPU_OMP_THREADS_BIND` when it starts, and
that is fixed for the engine's life. Serving starts its spare engines (and the gate's candidate) on the spare
cores so that they do not share a core with the arms' engines; once such an engine becomes an arm's engine (a
promotion), it serves live traffic and belongs on the arms' cores, and a retired arm engine kept as a spare belongs
back on the spare cores. Otherwise, on the demo's 2 cores, a promoted candidate serves its arm's traffic from the
core the trainer and the next gate run on.

    pin_threads(worker_pids(engine_core_pids), parse_cores("0"))
"""

from __future__ import annotations

import os
from pathlib import Path


def on_cores(engine, cores: str) -> bool:
    """Whether `engine` is on `cores` after this call: it was, or its `bind` moved it there. An engine that cannot
    move (no `bind`, e.g. another engine kind) or a move to vLLM's own choice ("") stays where it is."""
    if (getattr(engine, "cpu_cores", "") or "") == cores:
        return True
    return bool(cores) and hasattr(engine, "bind") and engine.bind(cores)


def parse_cores(spec: str) -> set[int]:
    """'0', '0-3', '0,2,4-5' (vLLM's bind list; '|' separates ranks' lists: their union) -> core numbers."""
    cores: set[int] = set()
    for part in spec.replace("|", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first < 0 or last < first:
            raise ValueError(f"bad core range {part!r} in {spec!r}")
        cores.update(range(first, last + 1))
    return cores


def descendants(pid: int) -> list[int]:
    """pid's child processes, their children, ... (from /proc/<pid>/task/<tid>/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = [int(k) for k in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
            for k in kids:
                if k not in out:
                    out.append(k)
                    todo.append(k)
    return out


def pin_threads(pids: list[int], cores: set[int]) -> int:
    """Set the affinity of every thread of `pids` to `cores`; the number of threads moved."""
    moved = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cores)
                moved += 1
            except (ProcessLookupError, PermissionError):
                continue
    return moved


def thread_affinities(pid: int) -> dict[int, set[int]]:
    """Each thread of pid -> its allowed cores (tests, diagnostics)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = os.sched_getaffinity(int(tid))
        except ProcessLookupError:
            continue
    return out
