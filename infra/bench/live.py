"""`rtrl bench live --cycles N --json`: the live loop's learning curve. The service's path end to end on the
embedded stack: simulated users drive vLLM serving (control and treatment arms) through the SDK and Kafka, the
cadence starts production's Dagster cycle job (the reward job over the Kafka range, validate, measure, train, the
one gate, promote, deploy: a hot swap), for N cycles, with production's learning settings (infra/configs/bench-live.toml
only places the loop on one machine). Then the stack stops, and every promoted champion is scored against v0 with
the learning curve's scorer (`infra.learning.score.Scorer`) on the same fixed simulated users as
`rtrl bench learning --seeds 1` with the same seed.

One JSON object: the settings, per cycle its reward rows, the rows trained and those dropped by reason, the gate's
decision with every suite's, the champion after it and that champion against v0 on every curve metric, and the
seconds of each part.
"""

from __future__ import annotations

import time
from typing import Callable

from infra.config import CONFIGS_DIR
from infra.orchestrator.demo import Demo

LIVE_CONFIG = CONFIGS_DIR / "bench-live.toml"


class LiveBench(Demo):
    """The demo's machinery (stack, serving, users, the cadence and the Dagster cycle job) with the live bench's
    overlay instead of the demo's, in `<state_dir>/live`."""

    STATE_NAME = "live"
    OVERLAYS = [LIVE_CONFIG]

    def run_live(self, cycles: int) -> list:
        """N cycles of the live loop; their ledger records. Everything is stopped at the end."""
        from infra.orchestrator.ledger import Ledger

        self.prepare_state(resume=False)
        try:
            self.start_loop()
            done = self.run_cycles(cycles)
        finally:
            self.log("[live] stopping the stack")
            self.stop_all()
        ledger = Ledger(self.state)
        return [ledger.load(c) for c in done]


def cycle_row(rec) -> dict:
    """What the bench reports of a cycle's ledger record."""
    from infra.learning.loop import dropped_rows, trained_rows

    train, gate = rec.result("train"), rec.result("evaluate")
    counts = train.get("counts") or {}
    return {"cycle": rec.cycle_id, "status": rec.status, "error": rec.error[:300] if rec.error else "",
            "champion_before": rec.result("collect").get("champion"), "rows": rec.result("distill").get("rows"),
            "trained": trained_rows(counts),
            "on_policy": counts.get("kept_on_policy", 0), "stale": counts.get("kept_stale", 0),
            "dropped": dropped_rows(counts), "candidate": train.get("candidate"),
            "decision": gate.get("decision"), "reasons": gate.get("reasons"),
            "suites": [{k: s.get(k) for k in ("suite", "decision", "reasons", "vs_champion", "vs_anchor", "power")}
                       for s in gate.get("suites") or []],
            "champion": rec.result("promote").get("champion") or rec.result("collect").get("champion"),
            "seconds": {k: v.get("seconds") for k, v in rec.steps.items()}}


def score_champions(cfg, rows: list[dict], seed: int, log: Callable[[str], None]) -> dict:
    """Every cycle's champion against v0 on the seed's fixed scoring users (each champion served once); v0's own
    scores."""
    from infra.learning.score import Scorer
    from registry.client import Registry

    registry = Registry.from_config(cfg)
    scorer = Scorer(cfg, seed, log)
    v0 = registry.version_of("control")
    base = scorer.score(registry.local_path(v0), v0)["summary"]
    scored: dict[str, dict] = {}
    for row in rows:
        champion = str(row["champion"])
        if champion != v0 and champion not in scored:
            t = time.monotonic()
            scored[champion] = scorer.score(registry.local_path(champion), champion).get("vs_v0", {})
            log(f"[live] champion v{champion} scored against v0 ({time.monotonic() - t:.0f}s)")
        row["vs_v0"] = scored.get(champion, {})
    return base


def run(args, cfg, log: Callable[[str], None]) -> tuple[dict, bool]:
    from infra.bench.quiet import quiet_libraries

    quiet_libraries()
    if args.cycles < 1:
        return {"error": "--cycles must be at least 1"}, False
    t0 = time.monotonic()
    bench = LiveBench(cfg, args.config, list(args.overrides), log=log)
    records = bench.run_live(args.cycles)
    loop_s = time.monotonic() - t0
    rows = [cycle_row(r) for r in records]
    t = time.monotonic()
    v0 = score_champions(bench.cfg, rows, args.seed, log)
    c = bench.cfg
    result = {"executor": "dagster (the service's cycle job, executed in this process) on the embedded stack",
              "settings": {"trainer": c.trainer.model_dump(), "gate": c.gate.model_dump(),
                           "users": c.demo.users, "speed": c.demo.speed, "interval_s": c.orchestrator.interval_s,
                           "score_users": c.learning.score_users, "score_seed": c.learning.score_seed + args.seed},
              "v0": v0, "cycles": rows,
              "seconds": {"loop": round(loop_s, 1), "score": round(time.monotonic() - t, 1),
                          "total": round(time.monotonic() - t0, 1)}}
    last = rows[-1]["vs_v0"].get("edit_persistence_rate") if rows else None
    result["last_vs_v0_edit_persistence"] = last
    return result, len(records) == args.cycles
