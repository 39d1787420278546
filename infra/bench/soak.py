"""`rtrl bench soak --cycles N --json`: the loop for many cycles, to show that nothing grows with them. The service's
path on the embedded stack (the demo's machinery: Kafka, the archiver, vLLM serving with two arms, simulated users,
production's Dagster cycle job at an accelerated clock) with retention on (infra/configs/bench-soak.toml, on top of
the demo's overlay), for N cycles (default 24: five simulated days at the soak's cadence).

After each cycle it records the Kafka records its range held, each step's seconds, the 1-minute load average, the
resident memory of each long-lived process (the broker, the archiver, serving's gateway and its engines, the
simulated users, and this process, which runs the Dagster job and the cycle's steps; over the overlay's storage
"s3" the broker's object store and broker-watch too), the state's bytes and files by part, the Kafka log's bytes
in the object store (infra/bench/soak_probe.py), and which registry versions still hold artifacts. After the last
cycle it rolls back through the last K champions, each loaded from the artifact store and checked against its
digest, and restarts the archiver to count the manifests it reads.
The checks are infra/bench/soak_verdict.py's; the command exits 1 when one fails.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable

from infra.config import CONFIGS_DIR
from infra.orchestrator.demo import Demo

SOAK_CONFIG = CONFIGS_DIR / "bench-soak.toml"


class SoakBench(Demo):
    """The demo's loop with the soak's overlay, in `<state_dir>/soak`, recording a row after each finished cycle."""

    STATE_NAME = "soak"
    OVERLAYS = [CONFIGS_DIR / "demo.toml", SOAK_CONFIG]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rows: list[dict] = []

    def execute(self, cycle_id, tags, selection=None):
        success, rec = super().execute(cycle_id, tags, selection)
        if rec is not None and rec.status == "done" and all(r["cycle"] != cycle_id for r in self.rows):
            self.rows.append(self.measure(rec))
            r = self.rows[-1]
            self.log(f"[soak] {cycle_id}: {sum(r['seconds'].values()):.0f}s of steps, state "
                     f"{r['state']['total']['bytes'] / 2**20:.0f} MiB in {r['state']['total']['files']} files, "
                     f"{len(r['with_artifacts'])} versions hold artifacts")
        return success, rec

    def pids(self) -> dict[str, int]:
        """The long-lived processes of the loop: every managed process's recorded pid, and this one."""
        out = {"orchestrator": os.getpid()}
        for f in sorted((self.state / "run").glob("*.json")):
            try:
                out[f.stem] = int(json.loads(f.read_text())["pid"])
            except (OSError, ValueError, KeyError):
                continue
        return out

    def measure(self, rec) -> dict:
        from infra.bench.soak_probe import kafka_log_usage, process_rss, state_usage

        held = held_artifacts(self.cfg)
        return {"cycle": rec.cycle_id, "status": rec.status,
                "records": rec.result("collect").get("records"), "rows": rec.result("distill").get("rows"),
                "trained": (rec.result("train").get("counts") or {}).get("kept_on_policy"),
                "decision": rec.result("evaluate").get("decision"),
                "seconds": {k: v.get("seconds") for k, v in rec.steps.items()},
                "rss": process_rss(self.pids()), "state": state_usage(self.state),
                "kafka_log": kafka_log_usage(self.cfg.kafka), "load_1m": round(os.getloadavg()[0], 2), **held}

    def run_soak(self, cycles: int) -> dict:
        self.prepare_state(resume=False)
        try:
            self.start_loop()
            self.run_cycles(cycles)
            self.log("[soak] the archiver restarted: counting the manifests it reads")
            manifests = restart_archiver(self)
        finally:
            self.log("[soak] stopping the stack")
            self.stop_all()
        rollbacks = roll_back_chain(self.cfg, self.cfg.retention.keep_promoted, self.log)
        return {"archiver_restart": manifests, "rollbacks": rollbacks}


def held_artifacts(cfg) -> dict:
    """{"with_artifacts": versions whose artifacts are still stored, "aliased": versions an alias holds}."""
    from registry.retention import aliased_versions, versions_with_artifacts
    from registry.client import Registry

    registry = Registry.from_config(cfg)
    return {"with_artifacts": versions_with_artifacts(registry), "aliased": sorted(aliased_versions(registry))}


def restart_archiver(bench: Demo, timeout_s: float = 120.0) -> dict:
    """Stop the archiver and start it again (`rtrl archive --detach`, as the loop started it); what it logged having
    read to recover (its checkpoint and the manifests after it), and the same counted without it
    (`pipelines.archive.manifest.recovery_reads`, read before the restart)."""
    import re

    from infra.stack.process import ManagedProcess
    from pipelines.archive.manifest import recovery_reads

    proc = ManagedProcess("archiver", bench.state)
    proc.stop(timeout_s=30.0)
    before = recovery_reads(bench.cfg)
    start = proc.logfile.stat().st_size if proc.logfile.exists() else 0
    t = time.monotonic()
    bench.cli.run("archive", "--detach", step="archive", expect_json=False)
    pattern = re.compile(r"recovery read (.*?) and (\d+) manifests after it")
    while time.monotonic() - t < timeout_s:
        with open(proc.logfile, "rb") as f:
            f.seek(start)
            if m := pattern.search(f.read().decode(errors="replace")):
                return {**before, "logged": m.group(0), "manifests_logged": int(m.group(2)),
                        "seconds": round(time.monotonic() - t, 2)}
        time.sleep(0.5)
    return {**before, "logged": None, "manifests_logged": None, "seconds": round(time.monotonic() - t, 2)}


def roll_back_chain(cfg, keep: int, log: Callable[[str], None]) -> list[dict]:
    """Roll the champion back `keep` times (through the previous-champion chain); after each, the restored version
    is fetched from the artifact store into an empty cache and its content digest compared with its tag."""
    from registry.client import Registry, content_digest
    from registry.promotion import PromotionRefused, lock_for, lock_path_for, rollback

    registry = Registry.from_config(cfg)
    lock = lock_for(registry, lock_path_for(cfg.mlflow_tracking_uri(), cfg.state_path))
    out = []
    for _ in range(keep):
        try:
            result = rollback(registry, lock)
        except PromotionRefused as e:
            out.append({"ok": False, "error": str(e)})
            break
        version = result.champion
        cached = registry.cache_dir / registry.model / f"v{version}"
        shutil.rmtree(cached, ignore_errors=True)
        try:
            folder = registry.local_path(version)
            ok = content_digest(folder) == registry.digest(version)
            out.append({"version": version, "ok": ok})
        except Exception as e:    # noqa: BLE001 - any failure to load is the finding
            out.append({"version": version, "ok": False, "error": f"{type(e).__name__}: {e}"[:300]})
        log(f"[soak] rolled back to v{version}: {'loads, digest matches' if out[-1]['ok'] else out[-1]}")
    return out


def table(rows: list[dict]) -> str:
    """One line per cycle: steps' seconds, the state's size, the largest process, versions holding artifacts."""
    lines = [f"{'cycle':>6} {'records':>8} {'rows':>6} {'steps_s':>8} {'state_MiB':>9} {'files':>7} "
             f"{'archive_files':>13} {'kafka_log_MiB':>13} {'max_rss_MiB':>11} {'artifacts':>9}"]
    for r in rows:
        rss = max((v["self"] + v.get("children", 0) for v in r["rss"].values()), default=0)
        log = (r.get("kafka_log") or {}).get("bytes")
        log_mib = f"{log / 2**20:>13.1f}" if log is not None else f"{'-':>13}"
        steps_s = sum(v or 0 for v in r["seconds"].values())
        lines.append(f"{r['cycle']:>6} {r.get('records') or 0:>8} {r['rows'] or 0:>6} {steps_s:>8.0f} "
                     f"{r['state']['total']['bytes'] / 2**20:>9.1f} {r['state']['total']['files']:>7} "
                     f"{r['state']['archive']['files']:>13} {log_mib} {rss / 2**20:>11.0f} "
                     f"{len(r['with_artifacts']):>9}")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """Steps' seconds, state bytes by part and each process's memory per cycle, in three panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(range(1, len(rows) + 1))
    fig, axes = plt.subplots(3, 1, figsize=(8, 10), sharex=True)
    for step in sorted({s for r in rows for s in r["seconds"]}):
        axes[0].plot(x, [r["seconds"].get(step) or 0 for r in rows], label=step)
    axes[0].set_ylabel("step seconds")
    for part in [p for p in rows[0]["state"] if p not in ("total",)]:
        axes[1].plot(x, [r["state"][part]["bytes"] / 2**20 for r in rows], label=part)
    axes[1].set_ylabel("state MiB")
    for name in sorted({n for r in rows for n in r["rss"]}):
        axes[2].plot(x, [(r["rss"].get(name, {}).get("self", 0) + r["rss"].get(name, {}).get("children", 0))
                         / 2**20 for r in rows], label=name)
    axes[2].set_ylabel("RSS MiB")
    axes[2].set_xlabel("cycle")
    for ax in axes:
        ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path)


def run(args, cfg, log: Callable[[str], None]) -> tuple[dict, bool]:
    import sys

    from infra.bench.quiet import quiet_libraries
    from infra.bench.soak_verdict import verdict

    quiet_libraries()
    if args.cycles < 1:
        return {"error": "--cycles must be at least 1"}, False
    t0 = time.monotonic()
    bench = SoakBench(cfg, args.config, list(args.overrides), log=log)
    after = bench.run_soak(args.cycles)
    keep = bench.cfg.retention.keep_promoted
    checks = verdict(bench.rows, args.cycles, keep)
    checks["rollback"] = {"ok": len(after["rollbacks"]) == keep and all(r["ok"] for r in after["rollbacks"]),
                          "rollbacks": after["rollbacks"]}
    restart = after["archiver_restart"]
    checks["archiver_restart"] = {"ok": restart["manifests_logged"] is not None
                                  and restart["manifests_logged"] <= bench.cfg.archive.checkpoint_every_manifests,
                                  "bound": bench.cfg.archive.checkpoint_every_manifests, **restart}
    checks["ok"] = all(v["ok"] for k, v in checks.items() if k != "ok")
    print(table(bench.rows), file=sys.stderr)
    if args.plot:
        plot(bench.rows, args.plot)
    c = bench.cfg
    result = {"executor": "dagster (the service's cycle job, executed in this process) on the embedded stack",
              "settings": {"retention": c.retention.model_dump(), "users": c.demo.users, "speed": c.demo.speed,
                           "interval_s": c.orchestrator.interval_s},
              "checks": checks, "cycles": bench.rows, "seconds": round(time.monotonic() - t0, 1)}
    return result, checks["ok"]
