"""Dagster definitions of the cycle, its cadence sensor and the replay jobs (docs/orchestrator.md).

    rtrl orchestrator                                   # Dagster UI + daemon (the sensor starts cycles)
    dagster dev -m infra.orchestrator.definitions      # the same, by hand (RTRL_CONFIG / RTRL_SET name the config)

Assets, one per step, partitioned by cycle id (a dynamic partition added by the sensor), so the UI shows each
cycle's lineage: fixed_range -> reward_rows -> quality_report -> (ab_metrics, candidate_checkpoint ->
gate_decision -> champion_alias) -> serving_deployment. Each asset runs its step through `infra.orchestrator.steps.run_step`: the
ledger skips steps a crashed run already finished, and every step's own work is idempotent by cycle id, so
re-executing a failed run (or the sensor resuming it) never doubles work or data.

Jobs: `rtrl_cycle` (every step asset for one cycle partition), `rtrl_replay` (one time range of the archived event
log through the reward job, to a separate output; config start/end/out) and `rtrl_replay_hourly` (the same as an
hourly-partitioned asset: a backfill over a range of hours writes one window per hour).
Sensor: `cadence` (infra.orchestrator.cadence.decide over the ledger's latest record), every
orchestrator.sensor_interval_s; each tick's decision is also appended to <state_dir>/orchestrator/cadence.jsonl
(a failed cycle backing off, a stuck one and why), and each tick rotates the logs over their bound
(infra.orchestrator.housekeeping.rotate_logs).
"""
# no `from __future__ import annotations`: Dagster reads the context and config annotations at definition time
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from infra.config import load_config
from infra.orchestrator.backoff import RetryPolicy
from infra.orchestrator.cadence import count_mature_requests, decide, pid_alive, record_outcome
from infra.orchestrator.clock import clock_for
from infra.orchestrator.ledger import Ledger
from infra.orchestrator.steps import STEPS, CycleContext, finish, run_step

CONFIG_ENV, OVERRIDES_ENV = "RTRL_CONFIG", "RTRL_SET"
CYCLE_JOB, REPLAY_JOB = "rtrl_cycle", "rtrl_replay"
cycles = dg.DynamicPartitionsDefinition(name="cycles")

ASSETS = {  # step -> (asset name, what the asset is)
    "collect": ("fixed_range", "The Kafka offset range of the cycle and the champion that served it."),
    "distill": ("reward_rows", "The cycle's reward rows (Beam reward job; window = cycle id)."),
    "validate": ("quality_report", "Data-quality suites over the cycle's rows; a failure blocks the cycle."),
    "measure": ("ab_metrics", "The cycle's A/B metrics, treatment vs control (<state_dir>/ab; the dashboard)."),
    "train": ("candidate_checkpoint", "The candidate trained on the cycle's rows (MLflow version)."),
    "evaluate": ("gate_decision", "Gate: candidate vs the champion it was trained from."),
    "promote": ("champion_alias", "Compare-and-swap of alias champion to the candidate when the gate passed."),
    "specialize": ("org_champions", "Per org (specialize.enabled): its adapter trained, gated and promoted to "
                                    "champion@org."),
    "deploy": ("serving_deployment", "Serving reports the champion on its treatment arm."),
}


class RtrlResource(dg.ConfigurableResource):
    """The rtrl configuration the steps run with (the same file and overrides as the `rtrl` command). A subclass
    may give a new cycle overrides of its own (`new_cycle_settings`) when it wraps these definitions."""

    config_path: str = ""
    overrides: list[str] = []

    def load(self):
        return load_config(self.config_path or None, self.overrides)

    def new_cycle_settings(self, run: dg.DagsterRun) -> list[str]:
        """Overrides a new cycle starts with, fixed in its ledger record (CycleRecord.settings; a resumed cycle keeps
        its own): none here."""
        return []

    def with_settings(self, settings: list[str]) -> "RtrlResource":
        """The same configuration (and resource class) with a cycle's own overrides on top (CycleRecord.settings)."""
        return type(self)(config_path=self.config_path, overrides=[*self.overrides, *settings])


def resource_from_env() -> RtrlResource:
    return RtrlResource(config_path=os.environ.get(CONFIG_ENV, ""),
                        overrides=json.loads(os.environ.get(OVERRIDES_ENV, "[]")))


def _metadata(result: dict) -> dict:
    out = {}
    for k, v in result.items():
        if isinstance(v, bool) or v is None:
            out[k] = dg.MetadataValue.text(str(v))
        elif isinstance(v, (int, float)):
            out[k] = v
        elif isinstance(v, (dict, list)):
            out[k] = dg.MetadataValue.json(v)
        else:
            out[k] = dg.MetadataValue.text(str(v))
    return out


# what each step's asset is derived from (lineage in the UI); the ledger runs them in STEPS order
UPSTREAM = {"collect": [], "distill": ["collect"], "validate": ["distill"], "measure": ["validate"],
            "train": ["validate"], "evaluate": ["train"], "promote": ["evaluate"], "specialize": ["promote"],
            "deploy": ["specialize", "measure"]}


@contextmanager
def heartbeat(context, step: str, every_s: float):
    """While the block runs, a debug event in the run's log every `every_s`: the sensor takes a started run whose
    events stopped for `orchestrator.run_stale_s` for one whose worker died (`stale_runs`)."""
    done = threading.Event()
    t0 = time.monotonic()

    def beat():
        while not done.wait(every_s):
            context.log.debug(f"heartbeat: step {step} running for {time.monotonic() - t0:.0f}s")

    thread = threading.Thread(target=beat, name=f"heartbeat-{step}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def _step_asset(step: str):
    name, description = ASSETS[step]

    @dg.asset(name=name, partitions_def=cycles, deps=[ASSETS[u][0] for u in UPSTREAM[step]], group_name="cycle",
              description=description)
    def _asset(context: dg.AssetExecutionContext, rtrl: RtrlResource) -> dg.MaterializeResult:
        cfg = rtrl.load()
        cycle_id = context.partition_key
        def log(message: str) -> None:   # the step's progress: in Dagster's run log and on stderr
            context.log.info(message)
            print(message, file=sys.stderr, flush=True)

        # a new cycle takes the resource's settings for its run; a resumed one keeps those it started with
        ledger = Ledger.for_config(cfg)
        rec = ledger.begin(cycle_id, clock_for(cfg).now(), time.time(), rtrl.new_cycle_settings(context.run),
                           dagster_run_id=context.run_id)
        if rec.settings:
            rtrl = rtrl.with_settings(rec.settings)
            cfg = rtrl.load()
        ctx = CycleContext(cfg, rec, log, rtrl.config_path or None, list(rtrl.overrides))
        with heartbeat(context, step, cfg.orchestrator.heartbeat_s):
            result = run_step(ctx, ledger, step)
        if step == STEPS[-1]:
            finish(ctx, ledger)
        return dg.MaterializeResult(metadata=_metadata({"step": step, **result}))

    return _asset


cycle_assets = [_step_asset(step) for step in STEPS]
# a cycle's first half: its fixed range, reward rows, data-quality checks and A/B metrics. Run alone (the cycle job
# with this asset selection) it measures the traffic since the last cycle; the cycle stays running in the ledger
# and its train..deploy run when it is resumed (the cadence resumes a cycle whose runner is gone)
MEASURE_STEPS = ("collect", "distill", "validate", "measure")
MEASURE_SELECTION = [dg.AssetKey(ASSETS[s][0]) for s in MEASURE_STEPS]
# each step in a process of its own (the step's function runs there: infra.orchestrator.steps), one at a time: the
# steps share the cycle's ledger record (each saves it after its step), and measure and train, both after validate,
# would otherwise run at once and one's entry be lost. `rtrl demo` executes the same job in its own process.
STEP_EXECUTOR = dg.multiprocess_executor.configured({"max_concurrent": 1})
cycle_job = dg.define_asset_job(CYCLE_JOB, selection=[ASSETS[s][0] for s in STEPS], partitions_def=cycles,
                                executor_def=STEP_EXECUTOR,
                                description="One cycle: collect -> distill -> validate -> train -> evaluate -> "
                                            "promote -> deploy, resumable by cycle id; each step in its own process.")

ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
ENDED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


def record_decision(state_path: Path, now: datetime, decision, source: str) -> None:
    """Append one tick's decision to <state_dir>/orchestrator/cadence.jsonl (why a cycle started or not)."""
    p = Path(state_path) / "orchestrator" / "cadence.jsonl"
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a", encoding="utf-8") as f:
        f.write(json.dumps({"at": now.isoformat(), "wall": datetime.now(timezone.utc).isoformat(),
                            "source": source, "start": decision.start, "cycle_id": decision.cycle_id,
                            "resume": decision.resume, "reason": decision.reason, **decision.details,
                            **({"failure_recorded": decision.failure} if decision.failure else {})}) + "\n")


def run_alive(instance, rec) -> bool:
    """Whether the Dagster run executing cycle `rec` is active in the instance (queued, starting, started or
    canceling), on whichever host it runs. A record without a run id was run outside Dagster: its pid decides."""
    if not rec.dagster_run_id:
        return pid_alive(rec)
    run = instance.get_run_by_id(rec.dagster_run_id)
    return run is not None and run.status in ACTIVE


def run_crashed(instance, rec) -> bool:
    """Whether the runner of a running cycle that is no longer active died rather than finished: its Dagster run
    failed, was canceled or is gone (a run that succeeded ran the selection of steps it was given: the demo's measure
    steps alone). A record without a run id was run outside Dagster: its process is gone, so it died."""
    if not rec.dagster_run_id:
        return True
    run = instance.get_run_by_id(rec.dagster_run_id)
    return run is None or run.status != dg.DagsterRunStatus.SUCCESS


def stale_runs(instance, stale_s: float, now: float | None = None) -> list:
    """Started cycle runs whose newest event is older than `stale_s` (steps log a heartbeat every
    orchestrator.heartbeat_s): their run worker is gone. Each is marked failed, with the reason, so that the cycle
    is resumed."""
    now = time.time() if now is None else now
    out = []
    for run in instance.get_runs(filters=dg.RunsFilter(job_name=CYCLE_JOB, statuses=[dg.DagsterRunStatus.STARTED])):
        records = instance.get_records_for_run(run.run_id, limit=1, ascending=False).records
        last = records[0].timestamp if records else None
        if last is not None and now - last > stale_s:
            instance.report_run_failed(run, f"no event from this run for {now - last:.0f}s (more than "
                                            f"orchestrator.run_stale_s = {stale_s:g}): its run worker is gone; "
                                            "the cadence sensor resumes the cycle")
            out.append(run.run_id)
    return out


def prune_runs(instance, ledger: Ledger, latest, keep_cycles: int) -> list[str]:
    """Delete the ended cycle-job runs, with their event logs, of the finished cycles at least `keep_cycles` older
    than `latest` (the cycles whose step logs go: housekeeping.old_cycles); their run ids. Reads the runs the
    instance keeps, which this bounds."""
    from infra.orchestrator.housekeeping import old_cycles, record_of

    runs = instance.get_runs(filters=dg.RunsFilter(job_name=CYCLE_JOB, statuses=ENDED))
    cycles_of_runs = {r.tags.get("dagster/partition") for r in runs} - {None}
    old = set(old_cycles({c: record_of(ledger, c) for c in cycles_of_runs}, latest.seq, keep_cycles))
    gone = [r.run_id for r in runs if r.tags.get("dagster/partition") in old]
    for run_id in gone:
        instance.delete_run(run_id)
    return gone


def evaluate_cadence(instance, rtrl: RtrlResource, source: str = "sensor"):
    """One sensor tick: (decision, the run request or None). Skips while a cycle run is active in Dagster; a started
    run that stopped sending heartbeats is marked failed first (`stale_runs`). A runner found dead is recorded as a
    failure of its cycle (`record_outcome`); a new cycle's start removes old cycles' runs (`prune_runs`); every tick
    rotates the logs over their bound."""
    from infra.orchestrator.cadence import CadenceDecision

    cfg = rtrl.load()
    now = clock_for(cfg).now()
    failed = stale_runs(instance, cfg.orchestrator.run_stale_s)
    active = instance.get_runs(filters=dg.RunsFilter(job_name=CYCLE_JOB, statuses=ACTIVE), limit=1)
    if active:
        d = CadenceDecision(False, f"previous cycle still running (Dagster run {active[0].run_id[:8]}, "
                                   f"partition {active[0].tags.get('dagster/partition')})")
    else:
        o, ledger = cfg.orchestrator, Ledger.for_config(cfg)
        last = ledger.latest()
        d = decide(now, last, lambda: count_mature_requests(cfg, now), o.interval_s, o.min_mature_rows,
                   alive=lambda rec: run_alive(instance, rec), crashed=lambda rec: run_crashed(instance, rec),
                   retry=RetryPolicy.of(o))
        record_outcome(ledger, last, d, now, o.max_failures)
        if d.start and not d.resume and last is not None:
            d.details["runs_deleted"] = len(prune_runs(instance, ledger, last, o.keep_cycles))
    if failed:
        d.details["stale_runs_failed"] = failed
    record_decision(cfg.state_path, now, d, source)
    _rotate_logs(cfg)
    if not d.start:
        return d, None
    return d, dg.RunRequest(partition_key=d.cycle_id, run_key=f"{d.cycle_id}@{time.time():.0f}",
                            tags={"rtrl/reason": d.reason[:200], "rtrl/resume": str(d.resume).lower()})


def _rotate_logs(cfg) -> None:
    from infra.orchestrator.housekeeping import rotate_logs

    try:
        rotate_logs(cfg)
    except OSError as e:      # a log that cannot be rotated now is rotated at a later tick
        print(f"cadence: rotating logs: {e}", file=sys.stderr, flush=True)


def _sensor_interval() -> int:
    try:
        return max(1, int(resource_from_env().load().orchestrator.sensor_interval_s))
    except Exception:  # noqa: BLE001 -- a bad config is reported by the assets and `rtrl config --check`
        return 30


@dg.sensor(name="cadence", job=cycle_job, minimum_interval_seconds=_sensor_interval(),
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a cycle every orchestrator.interval_s after the last one started, when it has "
                       "finished and enough mature rows exist; otherwise skips with the reason.")
def cadence_sensor(context: dg.SensorEvaluationContext, rtrl: RtrlResource):
    decision, request = evaluate_cadence(context.instance, rtrl)
    if request is None:
        return dg.SkipReason(decision.reason)
    return dg.SensorResult(run_requests=[request],
                           dynamic_partitions_requests=[cycles.build_add_request([decision.cycle_id])])


# --- replay ------------------------------------------------------------------------------------------------------

class ReplayConfig(dg.Config):
    start: str                 # ISO time with zone; requests made in [start, end)
    end: str
    out: str = ""              # "" = <state_dir>/replay/<start>--<end>; never the production table


@dg.op(description="Recompute reward rows from the archived event log over [start, end) into a separate table.")
def replay_window(context: dg.OpExecutionContext, config: ReplayConfig, rtrl: RtrlResource) -> dict:
    from infra.orchestrator.replay import replay_range

    cfg = rtrl.load()
    return replay_range(cfg, config.start, config.end, config.out or None, log=context.log.info)


@dg.job(name=REPLAY_JOB, description="Replay one time range of the event log through the reward job.")
def replay_job():
    replay_window()


hourly = dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00", timezone="UTC")


@dg.asset(name="replayed_rewards_hourly", partitions_def=hourly, group_name="replay",
          description="The reward job replayed over one hour of the event log (backfill a range of hours); "
                      "written to <state_dir>/replay/hourly/window=<hour>.")
def replayed_rewards_hourly(context: dg.AssetExecutionContext, rtrl: RtrlResource) -> dg.MaterializeResult:
    from infra.orchestrator.replay import replay_range

    cfg = rtrl.load()
    w = context.partition_time_window
    out = cfg.state_path / "replay" / "hourly" / f"window={w.start.strftime('%Y-%m-%dT%H')}"
    r = replay_range(cfg, w.start.isoformat(), w.end.isoformat(), str(out), log=context.log.info)
    return dg.MaterializeResult(metadata=_metadata(r))


replay_hourly_job = dg.define_asset_job("rtrl_replay_hourly", selection=["replayed_rewards_hourly"],
                                        partitions_def=hourly)

defs = dg.Definitions(assets=[*cycle_assets, replayed_rewards_hourly], jobs=[cycle_job, replay_job,
                                                                               replay_hourly_job],
                      sensors=[cadence_sensor], resources={"rtrl": resource_from_env()})
