"""`rtrl chaos`: the loop under seeded faults, then the audit of every served request.

    run = ChaosRun(config_path, overrides, state, ChaosOptions(faults=20, seed=0), log)
    report = run.run()        # the JSON `rtrl chaos` prints

1. The loop comes up in a private state dir (`infra.chaos.loop`); simulated users drive serving and report
   through the SDK -> collector -> Kafka (`infra.chaos.users`); a short warm-up fills the log.
2. The fault plan (`infra.chaos.plan`) is played one fault at a time: a service is SIGKILLed, stays down its
   seeded downtime and is restarted; a job (the reward job's cycle, the trainer) is SIGKILLed at its seeded point
   and run again to completion; a flood replays messages straight to Kafka (`infra.chaos.floods`). The recovery
   time of a fault runs from the kill until the loop is healthy again: the process answers, every service still
   runs, and no producer (the users' SDK, serving's) is still spooling. A reward cycle runs after every
   `cycle_every` faults besides the killed ones, so join state crosses many cycle boundaries.
3. The users stop, their SDK and serving's drain, a last reward cycle runs, the archiver catches up, and the
   audit (`infra.chaos.audit`) checks every served request against the reward table and the event log.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import polars as pl

from infra.chaos.audit import audit, trajectory_frame
from infra.chaos.control import Control
from infra.chaos.floods import flood
from infra.chaos.kafka_io import read
from infra.chaos.loop import Loop, chaos_overrides, default_serving_cores
from infra.chaos.plan import FAULT_TYPES, FLOODS, SERVICES, Fault, make_plan
from infra.orchestrator.rtrl_cli import StepFailed

PROCESSES = ("broker", "collector", "archiver", "serving")


@dataclass
class ChaosOptions:
    faults: int = 20
    seed: int = 0
    types: tuple[str, ...] = FAULT_TYPES
    users: int = 12
    speed: float = 60.0             # simulated seconds per wall second
    lateness_wall_s: float = 60.0   # allowed lateness, in wall seconds of the run (x speed in event time)
    warmup_s: float = 20.0
    cycle_every: int = 4
    keep_running: bool = False
    serving_cores: str | None = None   # None: the last core (infra.chaos.loop.default_serving_cores)


@dataclass
class FaultRecord:
    fault: Fault
    injected: bool
    recovery_s: float | None
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"index": self.fault.index, "kind": self.fault.kind, "injected": self.injected,
                "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 2), **self.detail}


class ChaosRun:
    def __init__(self, config_path: str | None, overrides: list[str], state: Path, options: ChaosOptions,
                 log: Callable[[str], None] = print, v0_cache: Path | None = None):
        self.opt, self.log = options, log
        cores = default_serving_cores() if options.serving_cores is None else options.serving_cores
        extra = chaos_overrides(state, options.speed, options.lateness_wall_s, options.users, options.seed, cores)
        self.loop = Loop(config_path, [*overrides, *extra], state, log)
        self.cfg = self.loop.cfg
        self.ctl = Control(self.loop.stack, self.loop.cli, log)
        self.v0_cache = v0_cache or state.parent / "policy-v0"
        self.cycles: list[dict] = []
        self.failed_cycles: list[str] = []
        self.records: list[FaultRecord] = []
        self.collateral: Counter[str] = Counter()
        self.users = None
        self.t0 = time.monotonic()

    # --- reward cycles ---------------------------------------------------------------------------------------
    def next_cycle_id(self) -> str:
        return f"c{len(self.cycles) + 1}"

    def run_cycle(self, cid: str | None = None) -> dict:
        cid = cid or self.next_cycle_id()
        for attempt in range(3):   # a cycle that failed (e.g. the broker never delivered its range) is run again
            try:
                _, out = self.loop.cli.run("rewards", "--cycle", cid, step="rewards")
                break
            except StepFailed as e:
                if attempt == 2:   # the run goes on; the audit shows what the missing cycle cost
                    self.log(f"[cycle {cid}] failed three times, going on without it: {str(e).splitlines()[0]}")
                    self.failed_cycles.append(cid)
                    return {"cycle": cid, "rows": 0, "failed": True}
                self.log(f"[cycle {cid}] failed, running it again: {str(e).splitlines()[0]}")
        r = out["rewards"]
        self.cycles.append(r)
        self.log(f"[cycle {cid}] {r['records_in_range']} records, {r['rows']} rows, {r['requests_pending']} pending, "
                 f"{r['duplicates_dropped']} duplicates dropped, late events {r['late_events']}")
        return r

    # --- one fault -------------------------------------------------------------------------------------------
    def inject(self, f: Fault) -> FaultRecord:
        if f.kind in SERVICES:
            return self.service_fault(f)
        if f.kind == "reward_job":
            return self.reward_job_fault(f)
        if f.kind == "trainer":
            return self.trainer_fault(f)
        if f.kind in FLOODS:
            try:
                detail = flood(f.kind, self.cfg.kafka, f.size, f.seed, self.cfg.kafka.partitions)
            except TimeoutError as e:   # the broker did not deliver what it holds: reported, the run goes on
                return FaultRecord(f, False, None, {"reason": str(e)[:300]})
            return FaultRecord(f, detail["acknowledged"] > 0, None, detail)
        raise ValueError(f"unknown fault {f.kind!r}")

    def service_fault(self, f: Fault) -> FaultRecord:
        t0 = time.monotonic()
        self.ctl.kill(f.kind)
        time.sleep(f.downtime_s)
        self.ctl.start(f.kind)
        self.settle()
        return FaultRecord(f, True, time.monotonic() - t0, {"downtime_s": f.downtime_s})

    def reward_job_fault(self, f: Fault) -> FaultRecord:
        cid = self.next_cycle_id()
        after = f.kill_after_s
        for _ in range(3):     # a job that finished before its kill point is tried again, killed earlier
            killed, ran = self.ctl.kill_job(["rewards", "--cycle", cid], after, step="rewards")
            if killed:
                t0 = time.monotonic()
                r = self.run_cycle(cid)
                return FaultRecord(f, True, time.monotonic() - t0,
                                   {"cycle": cid, "killed_after_s": round(ran, 2), "rows": r["rows"]})
            self.cycles.append(self._manifest_summary(cid))
            cid, after = self.next_cycle_id(), after / 2
        return FaultRecord(f, False, None, {"reason": "the reward job finished before every kill point"})

    def _manifest_summary(self, cid: str) -> dict:
        m = json.loads((self.cfg.state_path / "rewards" / "cycles" / f"{cid}.json").read_text())
        c = m.get("counters", {})
        return {"cycle": cid, "rows": sum(n for _, n in m.get("partitions", [])), "as_of": m.get("as_of"),
                "records_in_range": m["range"]["records"], **{k: c.get(k, 0) for k in (
                    "duplicates_dropped", "requests_pending", "late_events", "late_requests")}}

    def trainer_fault(self, f: Fault) -> FaultRecord:
        window = next((c["cycle"] for c in reversed(self.cycles) if c["rows"] > 0), None)
        if window is None:
            self.run_cycle()
            window = next((c["cycle"] for c in reversed(self.cycles) if c["rows"] > 0), None)
        if window is None:
            return FaultRecord(f, False, None, {"reason": "no reward rows to train on yet"})
        run_id = f"chaos-t{f.index}"
        args = ["train", "--cycle", run_id, "--window", window]
        killed, ran = self.ctl.kill_job(args, f.kill_after_s, step="train")
        t0 = time.monotonic()
        detail = {"window": window, "killed_after_s": round(ran, 2)}
        try:
            _, out = self.loop.cli.run(*args, step="train")
        except StepFailed as e:
            if e.code != 2:    # 2: the selection refused the rows (an answer, not a crash)
                raise
            return FaultRecord(f, killed, time.monotonic() - t0 if killed else None,
                               {**detail, "rerun": "refused: " + str(e).splitlines()[0][:200]})
        return FaultRecord(f, killed, time.monotonic() - t0 if killed else None,
                           {**detail, "candidate": out["train"]["candidate"],
                            "candidates_registered": self.candidates(run_id)})

    def candidates(self, run_id: str) -> int:
        from registry.client import Registry

        reg = Registry.from_config(self.cfg)
        versions = reg.client.search_model_versions(f"name='{self.cfg.mlflow.registered_model}'")
        return sum((v.tags or {}).get("cycle") == run_id and (v.tags or {}).get("candidate") == "true"
                   for v in versions)

    # --- health ----------------------------------------------------------------------------------------------
    def settle(self, timeout_s: float = 120.0) -> None:
        """Every service runs (one that died of a fault elsewhere is restarted and counted) and no producer is
        spooling: the loop has recovered."""
        for name in PROCESSES:
            if not self.ctl.running(name):
                self.log(f"[chaos] {name} is not running (died of the last fault?): restarting it")
                self.collateral[name] += 1
                self.ctl.start(name)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.spooling():
                return
            time.sleep(0.5)
        self.log(f"[chaos] warning: producers still spooling {timeout_s:.0f}s after recovery")

    def spooling(self) -> bool:
        from infra.orchestrator.steps import serving_status

        users = self.users.sdk.stats() if self.users else {"spooling": False, "queue_depth": 0}
        serving = (serving_status(self.cfg, timeout_s=2.0) or {}).get("telemetry") or {}
        return bool(users["spooling"] or users["queue_depth"] > 1000 or serving.get("spooling"))

    # --- the run ---------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def run(self) -> dict:
        from infra.chaos.users import Users

        self.loop.prepare()
        plan = make_plan(self.opt.seed, self.opt.faults, self.opt.types)
        self.log(f"[chaos] state dir {self.loop.state}; {len(plan)} faults (seed {self.opt.seed}): "
                 f"{dict(Counter(f.kind for f in plan))}")
        try:
            key = self.loop.up(self.v0_cache)
            self.users = Users(self.cfg, key, self.log)
            self.users.start()
            self.log(f"[chaos] {self.opt.users} users at {self.opt.speed:g}x; warm-up {self.opt.warmup_s:.0f}s "
                     f"(loop up after {self.elapsed():.0f}s)")
            time.sleep(self.opt.warmup_s)
            self.play(plan)
            for extra in range(1, 4):   # a fault that could not happen (a job that finished first) is replaced
                missing = self.opt.faults - sum(r.injected for r in self.records)
                if missing <= 0:
                    break
                self.play(make_plan(self.opt.seed + extra, missing, self.opt.types))
            report = self.finish()
            return report
        finally:
            if self.users is not None and self.users.thread.is_alive():
                self.users.stop(flush_timeout_s=10)
            if not self.opt.keep_running:
                self.log("[chaos] stopping the loop")
                self.loop.stop()

    def play(self, plan: list[Fault]) -> None:
        for f in plan:
            time.sleep(f.gap_s)
            n = len(self.records) + 1
            self.log(f"[fault {n}] {f.kind} ({self.users.requests()} requests so far, {self.elapsed():.0f}s)")
            rec = self.inject(f)
            self.records.append(rec)
            if f.kind not in SERVICES:
                self.settle()
            self.log(f"[fault {n}] {f.kind}: "
                     + ("recovered in %.1fs" % rec.recovery_s if rec.recovery_s is not None else
                        "injected" if rec.injected else f"not injected: {rec.detail.get('reason')}"))
            if n % self.opt.cycle_every == 0:
                self.run_cycle()

    def finish(self) -> dict:
        self.log("[chaos] faults done; draining the clients' spools and stopping the users")
        self.settle()
        sdk = self.users.stop()
        self.settle()
        self.run_cycle()
        self.wait_archived()
        return self.report(sdk)

    def trajectories(self) -> pl.DataFrame:
        recs = []
        for m in read(self.cfg.kafka, ("trajectories",), None, idle_s=3.0):
            d = json.loads(m.value)
            recs.append({"event_id": d["event_id"], "request_id": d["request_id"],
                         "event_time": datetime.fromisoformat(d["event_time"].replace("Z", "+00:00")),
                         "privacy_mode": bool(d.get("privacy_mode")), "response_kind": d.get("response_kind")})
        return trajectory_frame(recs)

    def archived(self) -> pl.DataFrame:
        from pipelines.archive.layout import archive_root
        from pipelines.archive.reader import read_events

        return read_events(archive_root(self.cfg), "trajectory", dedupe=False).select("event_id", "request_id")

    def wait_archived(self, timeout_s: float = 90.0) -> None:
        want = set(self.trajectories()["event_id"].to_list())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if want <= set(self.archived()["event_id"].to_list()):
                return
            time.sleep(2.0)
        self.log("[chaos] warning: the archive did not catch up with the trajectories topic")

    def reward_rows(self) -> pl.DataFrame:
        table = self.cfg.state_path / "rewards" / "table"
        files = sorted(table.rglob("*.parquet"))
        if not files:
            return pl.DataFrame({"request_id": []}, schema={"request_id": pl.String})
        return pl.concat([pl.read_parquet(f, columns=["request_id"]) for f in files])

    def report(self, sdk_stats: dict) -> dict:
        last = next((c for c in reversed(self.cycles) if c.get("as_of")), {})
        as_of = datetime.fromisoformat(last["as_of"]) if last.get("as_of") else None
        result = audit(self.users.policy.snapshot(), self.trajectories(), self.reward_rows(), as_of,
                       self.cfg.rewards, archived=self.archived())
        injected = [r for r in self.records if r.injected]
        recoveries = [r.recovery_s for r in injected if r.recovery_s is not None]
        by_type = Counter(r.fault.kind for r in injected)
        rec_by_type: dict[str, float] = {}
        for r in injected:
            if r.recovery_s is not None:
                rec_by_type[r.fault.kind] = round(max(rec_by_type.get(r.fault.kind, 0.0), r.recovery_s), 2)
        out = {"faults_injected": len(injected), "requests_served": result.requests_served,
               "rewards_expected": result.rewards_expected, "rewards_lost": result.rewards_lost,
               "rewards_duplicated": result.rewards_duplicated, "rewards_pending": result.rewards_pending,
               "max_recovery_seconds": round(max(recoveries), 2) if recoveries else 0.0,
               "faults_by_type": dict(sorted(by_type.items())), "max_recovery_seconds_by_type": rec_by_type,
               "faults_not_injected": len(self.records) - len(injected),
               "collateral_restarts": dict(self.collateral),
               "audit": {k: v for k, v in result.as_dict().items() if k not in ("rewards_lost", "rewards_duplicated",
                                                                            "rewards_expected", "requests_served",
                                                                            "rewards_pending")},
               "reward_cycles": {"cycles": len(self.cycles), "failed": self.failed_cycles,
                                 "rows": sum(c["rows"] for c in self.cycles),
                                 **{k: sum(int(c.get(k, 0)) for c in self.cycles) for k in (
                                     "duplicates_dropped", "late_events", "late_requests")}},
               "users_sdk": {k: sdk_stats.get(k) for k in ("enqueued", "sent", "spooled", "resent", "dropped",
                                                           "spool_bytes")},
               "seed": self.opt.seed, "speed": self.opt.speed,
               "allowed_lateness_s": self.cfg.rewards.allowed_lateness_s, "seconds": round(self.elapsed(), 1),
               "state_dir": str(self.loop.state), "faults": [r.as_dict() for r in self.records]}
        return out
