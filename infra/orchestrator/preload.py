"""The cycle steps' heavy libraries, imported in a background thread while something else waits (the demo starts
its stack, serving and users meanwhile): the steps run in this process (infra.orchestrator.steps), and on a loaded
2-core machine their imports take 15-40 s that the first step would otherwise wait for.

    thread = preload_in_background(log)     # a daemon thread; a step that imports a module first waits for it

`FOREGROUND` modules are imported before the thread starts, in the caller's thread (see there why).

A module that cannot be imported here is reported and left to the step that needs it. DeepSpeed picks its
accelerator when imported, so it is preloaded only by a torch built without CUDA, with DS_ACCELERATOR=cpu as the
trainer sets it (`trainer.engine`).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from typing import Callable

PRELOAD = ("torch", "transformers", "polars", "pyarrow", "mlflow", "apache_beam", "great_expectations", "kafka",
           "transformers.models.auto.modeling_auto", "transformers.models.llama.modeling_llama",
           "mlflow.store.tracking.sqlalchemy_store", "pipelines.rewards.cycle_job", "pipelines.quality",
           "trainer.run", "evals.gate_run")
CPU_PRELOAD = ("deepspeed", "deepspeed.runtime.zero.muon.muon_optimizer")   # with a torch built without CUDA


def cpu_only_torch() -> bool:
    """Whether the installed torch was built without CUDA (asked without initialising any device)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None


def preload(modules=PRELOAD, log: Callable[[str], None] = print, deepspeed: bool = True) -> list[str]:
    """Import `modules` (and, with `deepspeed`, DeepSpeed on a CPU-only torch); the names that failed."""
    t0 = time.monotonic()
    names = list(modules)
    if names and deepspeed and cpu_only_torch():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        names += CPU_PRELOAD
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 -- the step that needs it imports (or fails) itself, as before
            failed.append(name)
            log(f"[steps] not preloaded {name}: {type(e).__name__}: {e}")
    log(f"[steps] {len(names) - len(failed)} libraries imported in {time.monotonic() - t0:.1f}s")
    return failed


# Imported in the calling thread before the background one starts: what the caller itself imports next (the stack's
# MLflow store and its SQL store). Two threads initialising one package whose modules import each other in a cycle
# (mlflow and mlflow.tracking) can each see the other's half-initialised module: ImportError "partially initialized
# module".
FOREGROUND = ("mlflow", "mlflow.store.tracking.sqlalchemy_store")


def preload_in_background(log: Callable[[str], None] = print, modules=PRELOAD,
                          foreground=FOREGROUND) -> threading.Thread:
    """Import `foreground` here, then `modules` in a daemon thread (returned)."""
    preload(foreground, log, deepspeed=False)
    thread = threading.Thread(target=preload, args=(modules, log), name="preload-steps", daemon=True)
    thread.start()
    return thread
