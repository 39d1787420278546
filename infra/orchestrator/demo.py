"""`rtrl demo`: the whole loop on one machine, from nothing (docs/orchestrator.md).

    demo = Demo(cfg, config_path, overrides, log)
    summary = demo.run(cycles=3)          # -> the summary dict (also written to --summary PATH)

1. a fresh demo state dir (`<state_dir>/demo`; `--resume` keeps it) with the embedded stack (broker, topics,
   MLflow store) and the archiver;
2. policy v0: the first demo bootstraps it (a few minutes) and keeps a copy in `<state_dir>/policy-v0`; later
   demos register that copy (seconds). Aliases champion and control point to it;
3. serving with two arms: control = alias control (frozen v0), treatment = alias champion (the RL lineage);
4. the accelerated clock (`demo.speed` simulated seconds per wall second) and the simulated users on it, driving
   serving through the SDK -> Kafka, in the background for the whole demo;
5. the Dagster cycle job, started by the cadence sensor (evaluated every couple of wall seconds) whenever
   `orchestrator.interval_s` of simulated time has passed since the last cycle started, the previous one finished
   and enough mature requests exist; each run is recorded in the Dagster instance of the demo state dir (the UI
   shows them), a failed run is resumed by the sensor;
6. after K cycles: the next cycle's first steps (collect -> measure, `demo.ab_tail`), so that the A/B also counts
   the traffic served while the last cycle ran (that cycle trains when the loop goes on), taken no earlier than
   `demo.ab_tail_until_s` after the start (the rest of the time budget goes to A/B traffic); the A/B metrics of
   the reward rows (pipelines.metrics) and the summary.
Without --keep-running everything is stopped at the end (also on Ctrl-C or an error).

Configuration, lowest layer first (`demo_config`, `Demo.overrides`):
  1. the defaults (infra/rtrl.toml, the config classes);
  2. the demo's overlay, infra/configs/demo.toml: the keys the demo changes in other sections (the cadence, the
     trainer's batch and rate, the gate's size, serving's spares and busy poll), less any key your config file sets;
  3. your --config file;
  4. your --set overrides;
  5. the run-time values (`run_time_settings`): the demo's state dir, its A/B split (`demo.new_split`), the core
     split of this machine, the users' think and session-gap times at `demo.pace`, where v0 and the gate's suite
     are kept; and per cycle, the time budget's rows and gate samples (infra.orchestrator.budget).
Every `rtrl` command the demo runs gets the same file and overrides (`--config`, then `--set` for layers 2, 4 and 5),
so the demo and its steps, serving and users all see one validated config. The demo's own settings are [demo].
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from infra.config import CONFIGS_DIR, load_config, overlay_overrides, render_overrides
from infra.orchestrator.clock import AcceleratedClock, clock_path
from infra.orchestrator.config import DemoConfig
from infra.orchestrator.ledger import BLOCKED, DONE, CycleRecord, Ledger, next_cycle_id
from infra.orchestrator.rtrl_cli import RtrlCli, StepFailed
from trainer.bootstrap.bootstrap import policy_cache, stale_reason

DEMO_CONFIG = CONFIGS_DIR / "demo.toml"   # the demo's overlay on the default config
SPECIALIZE_CONFIG = CONFIGS_DIR / "specialize.toml"   # `--specialize`: its overlay on the demo's
MAX_ATTEMPTS = 3       # runs of one cycle id (the first and two resumptions) before the demo gives up
RESUME_MARGIN_S = 120.0  # wall seconds the last demo's users ran on after its last cycle record (tail, summary, stop)
# Dagster's own per-event console lines stay in its run log (the UI); the steps print their progress themselves
QUIET_DAGSTER = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def finished_cycles(latest: CycleRecord | None) -> int:
    """How many cycles have finished when `latest` is the ledger's latest: every one before it (cycles run one at a
    time, each resumed until it finishes), and it too when it is done or blocked."""
    if latest is None:
        return 0
    return latest.seq - (0 if latest.status in (DONE, BLOCKED) else 1)


class DemoError(RuntimeError):
    pass


def demo_config(cfg, config_path: str | None, overrides: list[str], specialize: bool = False,
                overlays: list[Path] | None = None):
    """(the overrides that layer the demo's overlay under the user's config, the config they give in the user's state
    dir): defaults < infra/configs/demo.toml < the user's config file < the user's --set. `cfg` is the user's own
    config (as `rtrl` loaded it); the demo works in `<its state_dir>/demo` and keeps v0 and the gate's suite in its
    state dir. `overlays`: other overlays instead of the demo's (`rtrl bench live`)."""
    if overlays is None:
        overlays = [DEMO_CONFIG, *([SPECIALIZE_CONFIG] if specialize else [])]
    layered = [*(o for overlay in overlays for o in overlay_overrides(overlay, config_path)), *overrides]
    return layered, load_config(config_path, layered).model_copy(update={"state_dir": cfg.state_dir})


def core_settings(n: int | None) -> dict[str, str]:
    """Serving's engines on the first half of the cores, the gate's candidate engines (and serving's spares, which
    the candidate stage takes) on the rest: two vLLM workers bound to one core (vLLM's automatic choice is the same
    core for both) stall each other. None on a single core."""
    if not n or n < 2:
        return {}
    half = n // 2
    first = "0" if half == 1 else f"0-{half - 1}"
    rest = str(half) if n - half == 1 else f"{half}-{n - 1}"
    return {"serving.cpu_cores": first, "gate.tasks.engine_cpu_cores": rest, "serving.spare_cpu_cores": rest}


def pace_settings(cfg) -> dict[str, list[float]]:
    """The simulator's think and session-gap times divided by `demo.pace` (to 0.1 s): slower users, so that more of
    them (the A/B units) make the same requests per second."""
    s, pace = cfg.simulator, cfg.demo.pace
    return {"simulator.think_s": [round(x / pace, 1) for x in s.think_s],
            "simulator.session_gap_s": [round(x / pace, 1) for x in s.session_gap_s]}


def run_time_settings(base, state: Path, experiment: str) -> dict:
    """The demo's values that depend on this run and machine, set after every other layer: its state dir, its A/B
    split, the cores (`core_settings`), the users' pace (`pace_settings`), and where the gate's generated suites (the
    held-out one, the orgs' own) and v0 are kept (in the user's state dir, outside the demo's fresh one). `base`:
    the demo's config in the user's state dir (`demo_config`)."""
    from evals.gate_run import default_suite_dir, suites_root

    return {**core_settings(os.cpu_count()), "state_dir": str(state), "serving.experiment": experiment,
            **pace_settings(base), "gate.tasks.suite_dir": str(default_suite_dir(base)),
            "gate.tasks.suites_root": str(suites_root(base)),
            "policy.cache_dir": str(policy_cache(base))}


def tail_wait_s(demo: DemoConfig, elapsed: float) -> float:
    """Wall seconds to wait after the last cycle before measuring the A/B tail: at least `ab_tail_wait_s`, and
    long enough to reach `ab_tail_until_s` since the demo started."""
    return max(demo.ab_tail_wait_s, demo.ab_tail_until_s - elapsed, 0.0)


def experiment_path(state: Path) -> Path:
    return state / "experiment.txt"


def demo_experiment(cfg, state: Path, resume: bool) -> str:
    """The demo's A/B split salt: `serving.experiment` without `demo.new_split`; on --resume the one the demo in
    `state` used (its users stay in their arms; `serving.experiment` for a demo that kept none); else a new one,
    `<serving.experiment>-<8 hex digits>`."""
    if not cfg.demo.new_split:
        return cfg.serving.experiment
    if resume:
        path = experiment_path(state)
        return path.read_text().strip() if path.is_file() else cfg.serving.experiment
    return f"{cfg.serving.experiment[:55]}-{secrets.token_hex(4)}"


class Demo:
    STATE_NAME = "demo"     # the loop's folder under the user's state dir (`rtrl bench services` has its own)
    OVERLAYS: list[Path] | None = None    # None: the demo's (demo.toml, and specialize.toml with --specialize)

    def __init__(self, cfg, config_path: str | None, overrides: list[str], log: Callable[[str], None] = print,
                 resume: bool = False, specialize: bool = False):
        self.state = cfg.state_path / self.STATE_NAME
        self.config_path = config_path
        self.specialize = specialize
        layered, self.base = demo_config(cfg, config_path, overrides, specialize, self.OVERLAYS)
        self.v0_cache = policy_cache(self.base)
        self.experiment = demo_experiment(self.base, self.state, resume)
        # what every `rtrl` command of the demo runs with, and the demo itself
        self.overrides = [*layered, *render_overrides(run_time_settings(self.base, self.state, self.experiment))]
        self.cfg = load_config(config_path, self.overrides)
        self.log = log
        # the demo's own processes (archiver, bootstrap, users, UIs); the cycle's steps run in this process
        self.cli = RtrlCli(config_path, self.overrides, self.state / "orchestrator" / "logs" / "demo",
                           self.cfg.orchestrator.step_timeout_s)
        self.t0 = time.monotonic()
        self.interrupted = False
        self._dagster = None      # (instance, cycle job, definitions module, resource): `dagster()`

    # --- set-up ----------------------------------------------------------------------------------------------
    def prepare_state(self, resume: bool) -> None:
        if self.state.exists() and not resume:
            self.stop_all(quiet=True)
            shutil.rmtree(self.state)
        self.state.mkdir(parents=True, exist_ok=True)

    def preload_steps(self) -> None:
        """The steps run in this process: their libraries are imported in a background thread, first, while the
        stack, serving and the users start (`demo.preload_steps`)."""
        if self.cfg.demo.preload_steps:
            from infra.orchestrator.preload import preload_in_background

            preload_in_background(self.log)

    def start_stack(self) -> None:
        from infra.stack.stack import Stack

        Stack(self.cfg).up(log=lambda m: self.log(f"[stack] {m}"))
        self.cli.run("archive", "--detach", step="archive", expect_json=False)
        self.background("archiver")

    def background(self, name: str) -> None:
        """Lower the managed process `name` to `demo.background_nice`: it uses the CPU the cycle's steps and
        serving leave. The archiver only: niced users make far less traffic while cycles run, and too few A/B
        rows."""
        from infra.stack.process import ManagedProcess

        if self.cfg.demo.background_nice:
            ManagedProcess(name, self.state).renice(self.cfg.demo.background_nice)

    def ensure_v0(self) -> str:
        from registry.client import Registry

        registry = Registry.from_config(self.cfg)
        if (v := registry.version_of("champion")) is not None:
            return v
        stale = stale_reason(self.v0_cache, self.cfg.policy)
        if not stale:
            # the cached v0: a copy and a registration (MLflow is imported here already), in this process, so that
            # serving starts loading now and not after another interpreter's imports
            from trainer.bootstrap.bootstrap import bootstrap

            self.log(f"[v0] registering the cached default policy {self.v0_cache}")
            bootstrap(self.cfg, log=lambda m: None)
            return registry.version_of("champion")
        if not self.cfg.policy.base_checkpoint:
            if self.v0_cache.exists():
                self.log(f"[v0] not reusing {self.v0_cache}: {stale}")
            self.log("[v0] bootstrapping the default policy (first demo on this machine: a few minutes; later "
                     f"demos reuse {self.v0_cache})")
        self.cli.run("bootstrap", step="bootstrap", echo=self.log)
        return registry.version_of("champion")

    def ensure_suite(self) -> None:
        from evals.gate_run import default_suite

        default_suite(self.base, log=self.log)     # made once, at gate.tasks.suite_dir (in the user's state dir)
        self.org_suites()

    def org_suites(self) -> dict[str, Path]:
        """--specialize: each simulated org's own suite (made once, under gate.tasks.suites_root in the user's state
        dir,
        when gate.tasks.org_suites_dir is not set); {} for the plain demo."""
        from evals.org_gate import org_suite

        if not self.specialize:
            return {}
        orgs = self.cfg.specialize.orgs or [f"o{i}" for i in range(self.cfg.simulator.orgs)]
        return {org: org_suite(self.cfg, org, self.log) for org in orgs}

    def start_serving(self) -> None:
        """`rtrl serve --detach` from this process (a new interpreter would first import for seconds)."""
        from infra.commands.serve import start_detached

        self.log("[serving] loading the control and treatment engines (vLLM)")
        start_detached(self.cfg, self.config_path, self.overrides, say=lambda m: None)

    def resumed_origin(self) -> datetime | None:
        """--resume: where the last demo's simulated time stood when it stopped (a little after its last cycle's
        last record, and after every cycle's start), so that the new events come after the old ones and the next
        cycle's range, the rewards' maturity and the cadence stay in order. None when there is no earlier demo."""
        records, path = Ledger(self.state).all(), clock_path(self.state)
        if not records or not path.exists():
            return None
        last_wall = max(max(r.finished_wall or 0.0, r.started_wall) for r in records)
        prev = AcceleratedClock.load(path)
        prev.wall = lambda: last_wall + RESUME_MARGIN_S
        margin = timedelta(seconds=RESUME_MARGIN_S * prev.speed)
        return max(prev.now(), max(datetime.fromisoformat(r.started_at) for r in records) + margin)

    def start_clock_and_users(self, resume: bool = False) -> AcceleratedClock:
        d = self.cfg.demo
        # simulated time runs `speed`x; it starts far enough in the past that no event time passes the present
        origin = (datetime.now(timezone.utc) - timedelta(seconds=d.timeout_s * d.speed + 86400)).replace(
            microsecond=0)
        if resume and (went_on := self.resumed_origin()) is not None and went_on > origin:
            origin = went_on
        clock = AcceleratedClock(origin.isoformat(), time.time(), d.speed)
        clock.save(clock_path(self.state))
        from infra.stack.process import ManagedProcess

        proc = ManagedProcess("simulator", self.state)
        start = render_overrides({"simulator.start_time": clock.now().isoformat()})[0]
        argv = self.cli.argv("--set", start, "simulate",
                             "--users", str(d.users), "--speed", str(d.speed), "--duration", str(d.timeout_s))
        proc.start(argv)
        self.log(f"[users] {d.users} simulated users at {d.speed:g}x from {clock.now().isoformat()} "
                 f"(log: {proc.logfile})")
        return clock

    # --- the loop --------------------------------------------------------------------------------------------
    def dagster(self):
        """(the demo's Dagster instance, the cycle job, the definitions module, the demo's resource), set up once:
        production's cycle with the demo's budget (infra.orchestrator.demo_definitions)."""
        if self._dagster is None:
            from infra.orchestrator.instance import dagster_home

            os.environ["DAGSTER_HOME"] = str(dagster_home(self.state))
            import logging
            import warnings

            logging.getLogger("kafka").setLevel(logging.CRITICAL)  # kafka-python's timing chatter and close races
            logging.getLogger().setLevel(logging.ERROR)            # Beam's "apitools not found" notice
            warnings.filterwarnings("ignore", category=UserWarning, module="dagster")
            os.environ["RTRL_CONFIG"] = self.config_path or ""
            os.environ["RTRL_SET"] = json.dumps(self.overrides)
            import dagster as dg

            from infra.orchestrator import definitions as defs_mod
            from infra.orchestrator.demo_definitions import demo_definitions

            defs = demo_definitions(self.config_path, self.overrides)
            self._dagster = (dg.DagsterInstance.get(), defs.resolve_job_def(defs_mod.CYCLE_JOB), defs_mod,
                             defs.resources["rtrl"])
        return self._dagster

    def execute(self, cycle_id: str, tags: dict, selection=None) -> tuple[bool, CycleRecord | None]:
        """One in-process run of the cycle job for `cycle_id` (every step, or the `selection` of assets): whether it
        succeeded, and the cycle's ledger record after it."""
        instance, job, defs_mod, _ = self.dagster()
        instance.add_dynamic_partitions(defs_mod.cycles.name, [cycle_id])
        result = job.execute_in_process(partition_key=cycle_id, instance=instance, raise_on_error=False, tags=tags,
                                        asset_selection=selection, run_config=QUIET_DAGSTER)
        rec = Ledger(self.state).load(cycle_id)
        # Dagster's in-process run takes Ctrl-C/SIGTERM itself and reports an interrupted run
        if self.interrupted or (rec is not None and "ExecutionInterrupted" in rec.error):
            raise KeyboardInterrupt
        return result.success, rec

    def run_cycles(self, cycles: int) -> list[str]:
        from infra.orchestrator.demo_definitions import SETTINGS_TAG

        instance, _, defs_mod, resource = self.dagster()
        ledger = Ledger(self.state)
        attempts: dict[str, int] = {}
        last_reason, deadline = "", self.t0 + self.cfg.demo.timeout_s
        while finished_cycles(ledger.latest()) < cycles:     # one record a tick, not the whole ledger
            if time.monotonic() > deadline:
                raise DemoError(f"the demo ran past demo.timeout_s ({self.cfg.demo.timeout_s:.0f}s); last: "
                                f"{last_reason}")
            self.check_background()
            decision, request = defs_mod.evaluate_cadence(instance, resource, source="demo")
            if decision.details.get("stuck"):      # only an operator clears it: waiting would end in the timeout
                raise DemoError(decision.reason)
            if request is None:
                if decision.reason.split(":")[0] != last_reason.split(":")[0]:
                    self.log(f"[cadence] skip: {decision.reason}")
                last_reason = decision.reason
                time.sleep(self.cfg.orchestrator.sensor_interval_s)
                continue
            cid = decision.cycle_id
            attempts[cid] = attempts.get(cid, 0) + 1
            if attempts[cid] > MAX_ATTEMPTS:
                rec = ledger.load(cid)
                raise DemoError(f"cycle {cid} failed {MAX_ATTEMPTS} times; last error: {rec.error if rec else '?'}")
            self.log(f"[cadence] start {cid}: {decision.reason} (elapsed {self.elapsed():.0f}s)")
            tags = dict(request.tags)
            if ledger.load(cid) is None and (settings := self.cycle_settings(cid, cycles, ledger)):
                tags[SETTINGS_TAG] = json.dumps(settings)
            success, rec = self.execute(cid, tags)
            self.log(f"[cycle {cid}] {rec.status if rec else '?'} after {self.elapsed():.0f}s"
                     + ("" if success else f": {rec.error[:300] if rec else 'run failed'}"))
        return [r.cycle_id for r in ledger.all() if r.status in (DONE, BLOCKED)][:cycles]

    def cycle_settings(self, cycle_id: str, cycles: int, ledger: Ledger) -> list[str]:
        """A new cycle's overrides: none for the first, or when the demo's settings fit its share of
        `demo.budget_s`; else fewer rows and gate samples (infra.orchestrator.budget)."""
        from infra.orchestrator.budget import cycle_costs, plan_cycle
        from registry.client import Registry

        d = self.cfg.demo
        records = ledger.all()
        if not d.budget_s or not records:
            return []
        registry = Registry.from_config(self.cfg)
        costs = cycle_costs(records, self.cfg.gate.tasks.samples_per_task, registry.version_of("control"),
                            registry.version_of("champion"))
        if costs is None:
            return []
        left = cycles - len([r for r in records if r.status in (DONE, BLOCKED)])
        plan = plan_cycle(costs, d.budget_s - self.elapsed(), left, self.cfg, d.ab_tail)
        self.log(f"[budget] {cycle_id}: {plan.text()} (demo.budget_s = {d.budget_s:.0f})")
        return plan.settings() if plan.reduced else []

    def measure_tail(self, stop_users: bool = False) -> CycleRecord | None:
        """The next cycle's first steps (collect, distill, validate, measure: `definitions.MEASURE_STEPS`) after the
        last one, so that the A/B counts the traffic served while the last cycle ran; that cycle stays running in
        the ledger and trains when the loop goes on. Its record, or None when it did not measure.

        `stop_users` (the demo ends after this measurement): the simulated users stop once collect has fixed the
        range. Nothing they do after it is measured, and on 2 cores their traffic through serving took most of the
        CPU from distill and validate (a 72,000-event range: 202 s and 42 s beside the users)."""
        defs_mod = self.dagster()[2]
        ledger = Ledger(self.state)
        records = ledger.all()
        last = records[-1] if records else None
        cid = last.cycle_id if last is not None and last.status not in (DONE, BLOCKED) else next_cycle_id(records)
        elapsed = self.elapsed()
        if (wait := tail_wait_s(self.cfg.demo, elapsed)) > 0:
            until = elapsed + wait
            self.log(f"[ab] {wait:.0f}s more traffic before the last measurement (at {until:.0f}s; "
                     "demo.ab_tail_wait_s, demo.ab_tail_until_s)")
            left = wait
            while left > 0:
                time.sleep(min(left, 30.0))
                self.check_background()
                if (left := until - self.elapsed()) > 1:
                    self.log(f"[ab] {left:.0f}s of traffic left before the last measurement")
        self.check_background()
        if last is None or last.cycle_id != cid or not last.done("collect"):     # its range is not fixed yet
            from infra.orchestrator.cadence import count_mature_requests
            from infra.orchestrator.clock import clock_for

            n, least = count_mature_requests(self.cfg, clock_for(self.cfg).now()), self.cfg.trainer.min_rows
            if n < least:
                self.log(f"[ab] nothing measured after the last cycle: {n} mature requests since its range, fewer "
                         f"than a cycle trains on (trainer.min_rows = {least})")
                return None
        self.log(f"[ab] measuring the traffic served since the last cycle's range as {cid}'s first steps "
                 f"({', '.join(defs_mod.MEASURE_STEPS)}; {cid} trains when the loop goes on)")
        tags = {"rtrl/reason": "demo: A/B of the traffic after the last cycle"}
        selection = defs_mod.MEASURE_SELECTION
        if stop_users:   # the range first; what users do after it is never measured
            success, rec = self.execute(cid, tags, selection[:1])
            if success and rec is not None and rec.done("collect"):
                self.stop_users(cid)
                selection = selection[1:]
        success, rec = self.execute(cid, tags, selection)
        if not success or rec is None or not rec.result("measure").get("measured"):
            self.log(f"[ab] warning: {cid} did not measure ({rec.error[:300] if rec else 'run failed'}); the A/B "
                     "covers the cycles' ranges only")
            return None
        self.log(f"[ab] {cid}: {rec.result('distill').get('rows')} reward rows measured ({self.elapsed():.0f}s)")
        return rec

    def stop_users(self, cycle_id: str) -> None:
        from infra.stack.process import ManagedProcess

        self.log(f"[users] stopping: {cycle_id}'s range is fixed, and their traffic would only slow its measurement")
        ManagedProcess("simulator", self.state).stop(timeout_s=30.0)

    def check_background(self) -> None:
        from infra.stack.process import ManagedProcess

        for name in ("serving", "simulator"):
            p = ManagedProcess(name, self.state)
            if p.info() is None:
                raise DemoError(f"{name} stopped unexpectedly; its log ends:\n{p.log_tail(30)}")

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    # --- tear-down -------------------------------------------------------------------------------------------
    def stop_all(self, quiet: bool = False) -> None:
        from infra.stack.stack import Stack

        cfg = self.cfg if self.state.exists() else None
        if cfg is None:
            return
        # the users and the Dagster UI stop together with the stack's workers (30 s: the users flush telemetry)
        Stack(cfg).down(log=(lambda m: None) if quiet else (lambda m: self.log(f"[stack] {m}")), also=("dagster",),
                        timeout_s=30.0)

    # --- made once, for every demo ----------------------------------------------------------------------------
    def prepare(self) -> None:
        """`rtrl demo --prepare`: v0 (bootstrapped when `<state_dir>/policy-v0` is missing), the gate's held-out
        suite with its flaky-check verdicts, and v0's gate episodes (`evals.gate_run.keep_episodes`, on a private
        engine), with --specialize also each org's own suite and v0's episodes there, each only when missing; all
        kept outside the demo's state dir, which is removed at the end. Then every demo, the first included,
        registers v0 in seconds and its first gate runs only the candidate."""
        from evals.gate_run import keep_episodes
        from infra.stack.stack import Stack

        if (done := self.prepared()) is not None:
            self.log(f"[prepare] nothing to do: v0 in {self.v0_cache}, its gate episodes in {done}")
            return
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")   # the gate's private engine runs in this process
        self.prepare_state(resume=False)
        try:
            self.preload_steps()
            Stack(self.cfg).up(log=lambda m: self.log(f"[stack] {m}"))
            v0 = self.ensure_v0()
            self.ensure_suite()
            kept = keep_episodes(self.cfg, v0, log=self.log)
            for org, suite in self.org_suites().items():      # --specialize: the anchor's episodes on each org's
                self.log(f"[prepare] v0 on org {org}'s own suite")                                  # own suite
                keep_episodes(self.cfg, v0, log=self.log, suite=suite, samples=self.cfg.gate.tasks.org_samples)
            self.log(f"[prepare] v0 in {self.v0_cache}; the gate's suite and v0's episodes in "
                     f"{kept.parent.parent if kept else '(not kept)'} ({self.elapsed():.0f}s)")
        finally:
            self.stop_all(quiet=True)
            shutil.rmtree(self.state, ignore_errors=True)

    def prepared(self) -> Path | None:
        """The cache file of v0's gate episodes when v0, the suite and those episodes all exist, else None."""
        from evals.gate_run import COMPLETE, episode_cache_of
        from registry.client import content_digest

        suite = Path(self.cfg.gate.tasks.suite_dir)
        if stale_reason(self.v0_cache, self.cfg.policy) or not (suite / COMPLETE).is_file():
            return None
        cache, digest = episode_cache_of(self.cfg)[0], content_digest(self.v0_cache)
        if not cache.covers(digest, self.cfg.gate.tasks.samples_per_task):
            return None
        for org_suite in self.org_suites().values():
            if not episode_cache_of(self.cfg, suite=org_suite)[0].covers(digest, self.cfg.gate.tasks.org_samples):
                return None
        return cache.path(digest)

    # --- all of it -------------------------------------------------------------------------------------------
    def start_loop(self, resume: bool = False) -> None:
        """Everything the cycles need, in order: the steps' libraries (in the background), the stack and the
        archiver, v0 as champion and control, serving, the gate's suite, the clock and the users."""
        self.preload_steps()
        self.start_stack()
        v0 = self.ensure_v0()
        self.log(f"[v0] champion = control = version {v0} ({self.elapsed():.0f}s)")
        self.start_serving()
        self.ensure_suite()
        self.start_clock_and_users(resume)

    def run(self, cycles: int, summary_path: str | None, keep_running: bool, resume: bool = False) -> dict:
        from infra.orchestrator.summary import cycle_summary, render_table

        self.prepare_state(resume)
        experiment_path(self.state).write_text(self.experiment + "\n")
        self.log(f"[demo] state dir {self.state}; {cycles} cycle(s), cadence {self.cfg.orchestrator.interval_s / 3600:g} "
                 f"simulated hours at {self.cfg.demo.speed:g}x; A/B split {self.experiment!r}")
        stopping = False

        def on_signal(signum, frame):  # Ctrl-C or SIGTERM: stop (Dagster turns it into a failed run; see below)
            self.interrupted = True
            raise KeyboardInterrupt

        old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start_loop(resume)
            done = self.run_cycles(cycles)
            tail = self.measure_tail(stop_users=not keep_running) if self.cfg.demo.ab_tail else None
            records = [r for r in Ledger(self.state).all() if r.cycle_id in done]
            summary = cycle_summary(self.cfg, records, self.cfg.demo.ab_window, tail=tail)
            if self.specialize:
                from infra.orchestrator.specialize_summary import specialization_summary

                summary.update(specialization_summary(self.cfg, [*records, *([tail] if tail else [])]))
            if self.cfg.simulator.background_rate > 0:
                from infra.orchestrator.specialize_summary import long_loop_summary

                summary.update(long_loop_summary(self.cfg, (summary.get("ab") or {}).get("since")))
            summary.update(seconds=round(self.elapsed(), 1), state_dir=str(self.state), experiment=self.experiment,
                           urls=self.urls(keep_running))
            if summary_path:
                Path(summary_path).parent.mkdir(parents=True, exist_ok=True)
                Path(summary_path).write_text(json.dumps(summary, indent=2, default=str) + "\n")
            print(render_table(summary), flush=True)
            stopping = not keep_running
            return summary
        except BaseException:
            stopping = not keep_running
            raise
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if stopping:
                self.log("[demo] stopping everything (use --keep-running to leave the stack up)")
                self.stop_all()
            elif keep_running:
                self.start_uis()

    def urls(self, keep_running: bool) -> dict:
        c, o = self.cfg, self.cfg.orchestrator
        set_state = f"--set state_dir={self.state}"
        return {"mlflow": f"http://{c.mlflow.ui_host}:{c.mlflow.ui_port}",
                "dagster": f"http://{o.dagster_host}:{o.dagster_port}",
                "dashboard": f"http://{c.dashboard.host}:{c.dashboard.port}",
                "serving": f"http://{c.serving.host}:{c.serving.port}/v1",
                "how": "running now (--keep-running); `rtrl " + set_state + " down` stops them" if keep_running else
                       f"stopped; start them on the demo's data with `rtrl {set_state} up --mlflow-ui`, "
                       f"`rtrl {set_state} orchestrator --detach`, `rtrl {set_state} dashboard`"}

    def start_uis(self) -> None:
        """--keep-running: the MLflow UI, the Dagster UI (+ daemon) and the dashboard, in the background."""
        from infra.stack.stack import Stack

        try:
            Stack(self.cfg).up(mlflow_ui=True, log=lambda m: self.log(f"[stack] {m}"))
            self.cli.run("orchestrator", "--detach", step="orchestrator", expect_json=False)
            self.cli.run("dashboard", "--detach", step="dashboard", expect_json=False)
        except (StepFailed, OSError) as e:
            self.log(f"[demo] warning: a UI did not start: {e}")
        for name, url in self.urls(True).items():
            if name != "how":
                self.log(f"[demo] {name}: {url}")
