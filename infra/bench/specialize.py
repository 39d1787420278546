"""`rtrl bench specialize`: specialization by organization on the simulated population, in one process
(`infra.learning.specialize`): one cycle of the loop with the cycle's specialize step (an adapter per org over the
shared champion, each gated by the one gate), and the specialized policy against the shared champion on fixed
scoring users, org by org and pooled. It runs in the world of `rtrl demo --specialize`
(infra/configs/specialize.toml: orgs with conflicting house rules, the house-rules v0, background tasks) with the
sizes of infra/configs/bench-specialize.toml.

One JSON object: the settings, the shared step (its gate and its champion against v0, the long loop's acceptance
included), per org the adapter's training, gate and promotion and specialized - shared on edit persistence, the
pooled change and the orgs won, the seconds of each part (`seconds`) and in all (`total_seconds`). Progress on
stderr.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from infra.config import CONFIGS_DIR

OVERLAYS = (CONFIGS_DIR / "specialize.toml", CONFIGS_DIR / "bench-specialize.toml")


def bench_config(config_path: str | None, overrides: tuple[str, ...]):
    """The bench's config: defaults < its overlays < the user's config file < the user's --set."""
    from infra.config import load_config, overlay_overrides

    layered = [o for overlay in OVERLAYS for o in overlay_overrides(overlay, config_path)]
    return load_config(config_path, [*layered, *overrides])


def run(config_path: str | None, overrides: tuple[str, ...], seed: int, out_dir: str | None,
        log: Callable[[str], None]) -> dict:
    from infra.bench.learning import v0_folder
    from infra.bench.quiet import quiet_libraries
    from infra.learning.specialize import run_specialization

    quiet_libraries()
    cfg = bench_config(config_path, overrides)
    v0 = v0_folder(cfg, log)
    work = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="rtrl-specialize-"))
    shutil.rmtree(work / f"seed-{seed}", ignore_errors=True)
    t0 = time.monotonic()
    try:
        result = run_specialization(cfg, v0, seed, work / f"seed-{seed}", log)
    finally:
        if not out_dir:
            shutil.rmtree(work, ignore_errors=True)
    result = {"total_seconds": round(time.monotonic() - t0, 1),
              "executor": "in-process (infra.orchestrator.steps.run_cycle), traffic from files served in process",
              "settings": {"learning": cfg.learning.model_dump(), "gate": cfg.gate.model_dump(),
                           "specialize": cfg.specialize.model_dump(),
                           "simulator": {k: getattr(cfg.simulator, k) for k in
                                         ("orgs", "keyword_only_orgs", "background_rate")},
                           "house_rules": cfg.policy.house_rules},
              **result}
    if out_dir:
        (work / "specialize.json").write_text(json.dumps(result, indent=1, default=str))
    return result
