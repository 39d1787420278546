"""One cycle's steps, each a library function of the cycle's context that returns its typed result
(infra.orchestrator.results) and is idempotent by cycle id (docs/orchestrator.md):

    collect   fix the Kafka offset range since the last cycle (the reward job's manifest) and the champion that
              served it
    distill   the Beam reward job over that range (pipelines.rewards.cycle_job.run_cycle): reward rows, window = the
              cycle id
    validate  the data-quality suite over the cycle's rows (pipelines.quality); a failure blocks the cycle
    measure   the cycle's A/B metrics, treatment vs control (pipelines.metrics) -> <state_dir>/ab (the dashboard)
    train     the champion on the cycle's rows (trainer.run.run_training): a candidate version; on `trainer.ranks`
              ranks under torchrun (rank 0 registers the one candidate and writes the result file this step reads)
    evaluate  the gate, candidate vs the champion it was trained from (evals.gate_run.run_gate)
    promote   compare-and-swap `champion` to the candidate when the gate passed
    specialize  with `specialize.enabled`, per org (`specialize.orgs`, else every org in the cycle's rows): its
              adapter on its rows over the shared champion, its gate (the held-out suite and its own,
              evals.org_gate; `specialize.parallel_gates` orgs at once) and the compare-and-swap of
              `champion@ORG`; an org with too few usable rows is skipped this cycle
    deploy    serving reports the new champion on its treatment arm (blue/green hot swap; a switch without a load
              when the gate staged the candidate there), or, when the champion stayed, that serving still serves it;
              then registry retention (`[retention]`, infra.retention): the artifacts of versions nothing holds
              any more are deleted, this host's checkpoint cache is bounded

The steps run in the executor's process: the only processes a cycle starts are the ones where isolation is the
point (torchrun's ranks, vLLM engines, the sandbox). Two executors run these same functions through `run_step`: the
in-process one (`run_cycle`: `rtrl cycle`, `rtrl bench live`'s scoring, the tests) and the Dagster job
(infra.orchestrator.definitions: the service, and `rtrl demo`, which executes that job in its own process).

`run_cycle(ctx)` runs the steps in order and records each in the ledger; a cycle that crashed is resumed by
running the same cycle id again. Why a rerun never doubles work or data, per step: the reward job keeps its own
manifest per cycle id (a started range is read again, a done one is not run again); rows are partitioned by
window = cycle id and written by overwrite; training finds the candidate already registered for the cycle;
the gate's decision is read back from the candidate's gate.* tags when it ran against the same champion; the
promotion is a compare-and-swap (already champion = done); deploy only observes.

A step that raises is a failure of the cycle (infra.orchestrator.ledger: `record_failure`): the cycle is failed, and
retried by the cadence after a capped exponential backoff (infra.orchestrator.backoff); after
`orchestrator.max_failures` failures in a row (no step finished in between) it is stuck, and every executor refuses
to run it (CycleStuck) until an operator clears it (`rtrl cycle ID --unstick` or `--retry`). A cycle that ends (done
or blocked) cleans up after itself (infra.orchestrator.housekeeping: the reward job's carry no cycle reads any more,
step logs of old cycles, oversized logs).

Failure injection for tests: `RTRL_FAIL_AFTER_STEP=<step>` raises InjectedFailure after that step's work and
before the ledger records it — the worst moment, so the resumed run must rely on the step's own idempotency.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from infra.orchestrator.errors import StepFailed
from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, STUCK, CycleRecord, Ledger
from infra.orchestrator.results import (RESULTS, CollectResult, DeployResult, DistillResult, GateResult,
                                        MeasureResult, OrgResult, PromoteResult, SpecializeResult, StepResult,
                                        TrainStepResult, ValidateResult)

STEPS = ("collect", "distill", "validate", "measure", "train", "evaluate", "promote", "specialize", "deploy")
FAIL_AFTER_ENV = "RTRL_FAIL_AFTER_STEP"


class InjectedFailure(RuntimeError):
    """Raised after a step's work when RTRL_FAIL_AFTER_STEP names it (tests of resumption)."""


class CycleBlocked(StepFailed):
    """The cycle cannot go on with this data (a data-quality suite failed, too few usable rows)."""


class CycleStuck(StepFailed):
    """The cycle failed `orchestrator.max_failures` times in a row: no executor runs it until an operator clears it."""

    def __init__(self, rec: CycleRecord):
        super().__init__(f"cycle {rec.cycle_id} is stuck after {len(rec.failures)} failures in a row (last: "
                         f"{rec.error[:300]}); clear it with `rtrl cycle {rec.cycle_id} --unstick` (the cadence "
                         f"retries it) or `rtrl cycle {rec.cycle_id} --retry` (run it here)", 4)


@dataclass
class CycleContext:
    cfg: object                       # infra.config.RtrlConfig
    record: CycleRecord
    log: Callable[[str], None] = print
    # the configuration's source, for the processes a step starts (torchrun's ranks read the same config)
    config_path: str | None = None
    overrides: list[str] = field(default_factory=list)
    clock: object | None = None       # the orchestrator's clock (infra.orchestrator.clock); None: the config's

    @property
    def cycle_id(self) -> str:
        return self.record.cycle_id

    def now(self):
        """The orchestrator's time (failures are recorded in it, as the cadence's times)."""
        from infra.orchestrator.clock import clock_for

        return (self.clock or clock_for(self.cfg)).now()

    def registry(self):
        from registry.client import Registry

        return Registry.from_config(self.cfg)

    def result(self, step: str):
        """An earlier step's result of this cycle, typed (infra.orchestrator.results)."""
        return RESULTS[step].model_validate(self.record.result(step))

    def say(self, line: str) -> None:
        """A step's progress line, tagged with the cycle."""
        self.log(f"[cycle {self.cycle_id}]   {line}")


def traffic_file(cfg, cycle_id: str):
    """With `orchestrator.source = "files"`: the cycle's traffic, `<traffic_dir>/<cycle id>.jsonl`."""
    from schemas import storage

    root = cfg.orchestrator.traffic_dir or str(cfg.state_path / "traffic")
    return storage.join(storage.normalize(root), f"{cycle_id}.jsonl")


def collect(ctx: CycleContext) -> CollectResult:
    """The cycle's input fixed: the Kafka offset range since the last cycle (the reward job's manifest), or the
    cycle's traffic file; and the champion that served it."""
    champion = ctx.registry().version_of("champion")
    if champion is None:
        raise StepFailed("alias champion is not set: run `rtrl bootstrap` first")
    if ctx.cfg.orchestrator.source == "files":
        from pipelines.rewards.files_job import drained_as_of, events_read, read_items
        from schemas import storage

        path = traffic_file(ctx.cfg, ctx.cycle_id)
        if not storage.exists(path):
            raise StepFailed(f"no traffic for cycle {ctx.cycle_id}: {path} does not exist")
        items = list(read_items([str(path)]))
        as_of = drained_as_of(items, ctx.cfg.rewards)
        return CollectResult(champion=champion, records=events_read(items),
                             as_of=as_of.isoformat() if as_of else None)
    from pipelines.rewards.cycle_job import CycleStore, plan

    m = plan(CycleStore(ctx.cfg.rewards_root()), ctx.cycle_id, ctx.cfg.kafka, ctx.cfg.rewards,
             ctx.cfg.orchestrator.range_idle_s, ctx.log)
    return CollectResult(champion=champion, records=m.range["records"], reward_cycle_seq=m.seq, after=m.after,
                         as_of=m.as_of)


def distill(ctx: CycleContext) -> DistillResult:
    """The reward job over the cycle's input, in this process: the Kafka range (what `rtrl rewards --cycle ID`
    runs) or the traffic file (pipelines.rewards.files_job), through the same join and sink."""
    if ctx.cfg.orchestrator.source == "files":
        return _distill_files(ctx)
    from infra.commands.rewards import cycle_rewards

    try:
        r = cycle_rewards(ctx.cfg, ctx.cycle_id, idle_s=ctx.cfg.orchestrator.range_idle_s, log=ctx.say)
    except ValueError as e:     # a range fixed against another cluster or another reward spec
        raise StepFailed(f"rewards: {e}", 2) from None
    return _distilled(r)


def _distilled(r: dict) -> DistillResult:
    return DistillResult(rows=r["rows"], records_in_range=r["records_in_range"], as_of=r["as_of"],
                         after=r["after"], out=r["out"], dead_letters=r["dead_letters"],
                         duplicates_dropped=r["duplicates_dropped"], unknown_labels=r["unknown_labels"],
                         late_events=r["late_events"], requests_pending=r["requests_pending"],
                         counters={k: v for k, v in r.items() if isinstance(v, int) and not isinstance(v, bool)},
                         seconds=r["seconds"])


def _distill_files(ctx: CycleContext) -> DistillResult:
    from infra.commands.rewards import summarize
    from pipelines.rewards.cycle_job import CycleStore
    from pipelines.rewards.files_job import run_files

    t0 = time.perf_counter()
    store = CycleStore(ctx.cfg.rewards_root())
    table = ctx.cfg.reward_table()
    summary = run_files(ctx.cycle_id, [str(traffic_file(ctx.cfg, ctx.cycle_id))], table, ctx.cfg.rewards,
                        result=store.result_path(ctx.cycle_id), dead_letters=store.dead_letter_path(ctx.cycle_id),
                        beam_args=ctx.cfg.beam.for_job("cycle", []))
    collected = ctx.result("collect")
    return _distilled({"rows": sum(n for _, n in summary["partitions"]), "records_in_range": collected.records,
                       "as_of": collected.as_of, "after": None, "out": str(table),
                       "seconds": round(time.perf_counter() - t0, 2), **summarize(summary["counters"])})


def validate(ctx: CycleContext) -> ValidateResult:
    from infra.commands.quality import check_table

    table = ctx.result("distill").out or str(ctx.cfg.reward_table())
    report = ctx.cfg.state_path / "quality" / ctx.cycle_id
    results, paths = check_table(ctx.cfg, table, ctx.cycle_id, report)
    failed = {r.name: sum(not x.success for x in r.results) for r in results if not r.success}  # suite -> rules
    if failed:
        raise CycleBlocked(f"data quality failed for cycle {ctx.cycle_id}: {failed}; training on it is blocked "
                           f"(report: {paths['html']})", 3)
    return ValidateResult(passed=True, report=str(paths["html"]), suites=len(results))


def measure(ctx: CycleContext) -> MeasureResult:
    from pipelines.metrics import MetricsStore, compute_cycle_metrics, scan_cycle

    table = ctx.result("distill").out or str(ctx.cfg.reward_table())
    try:
        rows = scan_cycle(table, ctx.cycle_id)
    except FileNotFoundError as e:
        return MeasureResult(measured=False, reason=str(e))
    store = MetricsStore.for_state_dir(ctx.cfg.state_path)
    res = compute_cycle_metrics(rows, ctx.cycle_id, as_of=ctx.result("collect").as_of, config=ctx.cfg.ab,
                                store=store)
    store.write(ctx.cycle_id, res)
    out = {}
    for name in HEADLINE_RATES:
        m = res.metric(name)
        out[name] = {"control": m.control, "treatment": m.treatment, "change": m.change, "low": m.low,
                     "high": m.high}
    versions = {a: [str(v) for v in vs] for a, vs in (res.versions or {}).items()}
    aa = is_aa(versions, ctx.cfg.ab.control_arm, ctx.cfg.ab.treatment_arm)
    return MeasureResult(measured=True, rows=res.counts.get("rows_used"), versions=versions,
                         srm_flagged=bool(res.srm.get("flagged")), **out,
                         monitors=[{k: m.get(k) for k in ("metric", "control", "treatment", "change", "status",
                                                          "reason")} for m in res.monitors],
                         aa=aa, aa_failed=aa and any(excludes_zero(out[n]) for n in HEADLINE_RATES))


HEADLINE_RATES = ("edit_persistence_rate", "dissatisfied_followup_rate")


def is_aa(versions: dict[str, list[str]], control: str, treatment: str) -> bool:
    """Both arms served the same versions (and some): the cycle compares a checkpoint with itself."""
    c, t = versions.get(control), versions.get(treatment)
    return bool(c) and sorted(c) == sorted(t or [])


def excludes_zero(rate: dict) -> bool:
    low, high = rate.get("low"), rate.get("high")
    return low is not None and high is not None and not (low <= 0 <= high)


def _train(ctx: CycleContext, step: str, org: str | None = None) -> dict:
    """`trainer.run.run_training` on the cycle's rows (an org's adapter with `org`): in this process on one rank,
    under torchrun on `trainer.ranks` ranks (rank 0 writes the result file read here). The result as a dict."""
    from infra.commands.train import train_cycle
    from trainer.launch import needs_launch
    from trainer.selection import SelectionError

    as_of = ctx.result("collect").as_of
    if needs_launch(ctx.cfg.trainer.ranks):
        return _train_ranks(ctx, step, org, as_of)
    try:
        return train_cycle(ctx.cfg, ctx.cycle_id, window=ctx.cycle_id, as_of=as_of, org=org, log=ctx.say)
    except (SelectionError, LookupError) as e:   # too few usable rows, immature rows: not a crash
        raise CycleBlocked(f"train: {e}", 2) from None


def _train_ranks(ctx: CycleContext, step: str, org: str | None, as_of: str | None) -> dict:
    """`rtrl train` under torchrun (one process per rank): its log in the cycle's log folder, its result from the
    file rank 0 writes."""
    from infra.argv import rtrl_args
    from trainer.launch import launch_argv, launch_env

    logs = step_log_dir(ctx.cfg, ctx.cycle_id)
    logs.mkdir(parents=True, exist_ok=True)
    result_file = logs / f"{step}.result.json"
    result_file.unlink(missing_ok=True)
    ranks = ctx.cfg.trainer.ranks
    args = ["train", "--cycle", ctx.cycle_id, "--window", ctx.cycle_id, "--result", str(result_file),
            *(["--as-of", as_of] if as_of else []), *(["--org", org] if org else [])]
    argv = launch_argv(ranks, rtrl_args(*args, config=ctx.config_path,
                                        overrides=[*ctx.overrides, f"trainer.ranks={ranks}"]))
    ctx.say(f"train on {ranks} ranks under torchrun (log: {logs / (step + '.log')})")
    with open(logs / f"{step}.log", "a", encoding="utf-8") as log_file:
        try:
            code = subprocess.run(argv, stdout=log_file, stderr=subprocess.STDOUT, env=launch_env(ranks),
                                  cwd=Path(__file__).resolve().parents[2],
                                  timeout=ctx.cfg.orchestrator.step_timeout_s).returncode
        except subprocess.TimeoutExpired:
            raise StepFailed(f"training on {ranks} ranks ran past orchestrator.step_timeout_s") from None
    tail = (logs / f"{step}.log").read_text(encoding="utf-8", errors="replace")[-1500:]
    if code == 2:
        raise CycleBlocked(f"train: {tail.strip().splitlines()[-1] if tail.strip() else 'refused'}", 2)
    if code != 0 or not result_file.is_file():
        raise StepFailed(f"training on {ranks} ranks exited {code} (log: {logs / (step + '.log')}):\n{tail}", code)
    return json.loads(result_file.read_text())


def train(ctx: CycleContext) -> TrainStepResult:
    t = _train(ctx, "train")
    return TrainStepResult.model_validate(t)


def _gate(ctx: CycleContext, candidate: str, champion: str | None) -> GateResult:
    """The gate in this process (its engines and sandboxes are processes of their own)."""
    from infra.commands.gate import gate_version

    try:
        summary = gate_version(ctx.cfg, candidate, champion, log=ctx.say)
    except (LookupError, ValueError) as e:    # an unknown version, no champion, a bad suite folder
        raise StepFailed(f"gate: {e}", 2) from None
    return GateResult.model_validate(summary)


def evaluate(ctx: CycleContext) -> GateResult:
    trained = ctx.result("train")
    candidate, parent = str(trained.candidate), str(trained.parent)
    if (gated := _gated(ctx, candidate, parent)) is not None:
        ctx.log(f"[cycle {ctx.cycle_id}] evaluate: version {candidate} was already gated against {parent}: "
                f"{gated.decision}")
        return gated
    return _gate(ctx, candidate, parent)


def promote(ctx: CycleContext) -> PromoteResult:
    from registry.promotion import PromotionRefused, lock_path_for
    from registry.promotion import promote as cas_promote

    gate = ctx.result("evaluate")
    candidate = str(ctx.result("train").candidate)
    registry = ctx.registry()
    if gate.decision != "promote":
        return PromoteResult(promoted=False, champion=registry.version_of("champion"),
                             reason=f"gate: {gate.decision} ({', '.join(gate.reasons) or 'no reason'})")
    if registry.version_of("champion") == candidate:
        return PromoteResult(promoted=True, champion=candidate, already=True)
    try:
        res = cas_promote(registry, candidate, lock_path_for(ctx.cfg.mlflow_tracking_uri(), ctx.cfg.state_path))
    except PromotionRefused as e:
        return PromoteResult(promoted=False, champion=registry.version_of("champion"), reason=f"refused: {e}")
    return PromoteResult(promoted=True, champion=res.champion, previous=res.previous)


def cycle_orgs(ctx: CycleContext) -> list[str]:
    """`specialize.orgs`, else the orgs of the cycle's reward rows."""
    if ctx.cfg.specialize.orgs:
        return list(ctx.cfg.specialize.orgs)
    import polars as pl

    from schemas.reward_table import read_reward_table

    rows = read_reward_table(ctx.cfg.reward_table(), ctx.cycle_id)
    return sorted(rows.select(pl.col("org_id").unique())["org_id"].to_list())


def _gated(ctx: CycleContext, label: str, against: str | None) -> GateResult | None:
    """The gate result tagged on `label` when a whole gate with this gate's suites ran against `against` already (a
    resumed cycle; a gate cut short leaves no `gate.suites`), else None."""
    tags = ctx.registry().info(label).tags
    if not (tags.get("gate.decision") and tags.get("gate.champion_version") == str(against)
            and tags.get("gate.suites") == ",".join(ctx.cfg.gate.suites)):
        return None
    return GateResult(decision=tags["gate.decision"], reasons=[r for r in tags.get("gate.reasons", "").split(",") if r],
                      interval=tags.get("gate.interval"), mlflow_run_id=tags.get("gate.run_id"),
                      candidate_version=label, champion_version=str(against), reused=True)


def train_org(ctx: CycleContext, org: str) -> OrgResult:
    """One org's adapter trained (idempotent: a resumed cycle finds its candidate); `trained` False when the org
    has too few usable rows this cycle."""
    try:
        t = _train(ctx, f"specialize-{org}", org=org)
    except CycleBlocked as e:   # too few usable rows (or immature ones): this org waits for the next cycle
        return OrgResult(trained=False, reason=str(e).splitlines()[-1][:300])
    return OrgResult(trained=True, candidate=f"{t['candidate']}@{org}", parent=t.get("parent"),
                     rows=t.get("counts") or {})


def gate_org(ctx: CycleContext, org: str, trained: OrgResult) -> dict:
    """The gate of an org's trained candidate against what the org is served now (read back on a resumed cycle):
    {decision, interval, reasons, suites}, or {"already": True} when its lineage's champion is the candidate already."""
    from registry.client import parse_label

    label = trained.candidate
    registry = ctx.registry()
    if registry.for_org(org).version_of("champion") == parse_label(label)[0]:   # a resumed cycle promoted it
        return {"decision": "promote", "already": True}
    g = _gated(ctx, label, registry.version_of(f"champion@{org}") or registry.version_of("champion")) or \
        _gate(ctx, label, None)
    return {"decision": g.decision, "interval": g.interval, "reasons": g.reasons, "suites": g.suites}


def promote_org(ctx: CycleContext, org: str, trained: OrgResult, gate: dict) -> OrgResult:
    """The compare-and-swap of champion@org for a candidate its gate passed."""
    from registry.client import parse_label
    from registry.promotion import PromotionRefused, lock_path_for
    from registry.promotion import promote as cas_promote

    label = trained.candidate
    if gate.get("already"):
        return trained.model_copy(update={"gate": "promote", "promoted": True, "champion": label, "already": True})
    registry = ctx.registry()
    result = trained.model_copy(update={"gate": gate.get("decision"), "interval": gate.get("interval"),
                                        "gate_reasons": gate.get("reasons") or [],
                                        "gate_suites": gate.get("suites") or []})
    if gate.get("decision") != "promote":
        return result.model_copy(update={"promoted": False, "champion": registry.version_of(f"champion@{org}")})
    try:
        cas_promote(registry.for_org(org), parse_label(label)[0],
                    lock_path_for(ctx.cfg.mlflow_tracking_uri(), ctx.cfg.state_path))
    except PromotionRefused as e:
        return result.model_copy(update={"promoted": False, "reason": f"refused: {e}"})
    return result.model_copy(update={"promoted": True, "champion": label})


def specialize(ctx: CycleContext) -> SpecializeResult:
    """Per org: train (one at a time: each trainer takes the trainer's cores), then gate the trained candidates,
    `specialize.parallel_gates` at once, then promote each that passed."""
    from concurrent.futures import ThreadPoolExecutor

    if not ctx.cfg.specialize.enabled:
        return SpecializeResult(enabled=False)
    trained = {org: train_org(ctx, org) for org in cycle_orgs(ctx)}
    ready = [org for org, t in trained.items() if t.trained]
    with ThreadPoolExecutor(max_workers=ctx.cfg.specialize.parallel_gates) as pool:
        gates = dict(zip(ready, pool.map(lambda org: gate_org(ctx, org, trained[org]), ready)))
    return SpecializeResult(enabled=True, orgs={org: promote_org(ctx, org, t, gates[org]) if org in gates else t
                                                for org, t in trained.items()})


def serving_status(cfg, timeout_s: float = 5.0) -> dict | None:
    """serving's GET /health body (503 while loading still carries it), or None when nothing answers on
    serving.host:port; over HTTPS when serving terminates TLS."""
    from serving.server import health

    answer = health(cfg.serving, timeout_s)
    return None if answer is None else answer[1]


def arms_on(status: dict | None, alias: str) -> dict[str, str]:
    """arm -> version served, for the arms that follow `alias`."""
    arms = (status or {}).get("arms", {})
    return {a: str(v.get("version")) for a, v in arms.items() if v.get("alias") == alias}


def deploy(ctx: CycleContext) -> DeployResult:
    """Serving serves the champion (`_deploy`); then registry retention (infra.retention.run.after_deploy), whose
    summary the result records."""
    from infra.retention.run import after_deploy

    out = _deploy(ctx)
    return out.model_copy(update={"retention": after_deploy(ctx.cfg, ctx.say, cycle_id=ctx.record.cycle_id)})


def _deploy(ctx: CycleContext) -> DeployResult:
    champion = str(ctx.result("promote").champion)
    if ctx.cfg.orchestrator.source == "files":
        return DeployResult(deployed=False, champion=champion, reason="traffic from files: the executor served it "
                            "in its own process, no serving to deploy to")
    status = serving_status(ctx.cfg)
    if status is None:
        return DeployResult(deployed=False, champion=champion,
                            reason="serving is not running; it serves the champion alias when started")
    deadline = time.monotonic() + ctx.cfg.orchestrator.deploy_timeout_s
    t0 = time.monotonic()
    while True:
        arms = arms_on(status, "champion")
        if arms and all(v == champion for v in arms.values()):
            swap = [s for s in status.get("swaps", []) if str(s.get("to_version")) == champion]
            out = DeployResult(deployed=True, champion=champion, arms=arms, waited_s=round(time.monotonic() - t0, 1),
                               swap_load_s=swap[-1].get("load_s") if swap else None)
            if champion in status.get("staged", []):   # the gate staged it; the alias holds it now
                from evals.endpoints import EndpointError, unstage

                try:
                    unstage(ctx.cfg, champion)
                except EndpointError as e:
                    ctx.log(f"[cycle {ctx.cycle_id}] deploy: unstaging version {champion}: {e}")
            return out
        if time.monotonic() > deadline:
            raise StepFailed(f"serving still serves {arms} {ctx.cfg.orchestrator.deploy_timeout_s:.0f}s after "
                             f"champion moved to {champion} (see its log)")
        time.sleep(1.0)
        status = serving_status(ctx.cfg) or status


STEP_FUNCS: dict[str, Callable[[CycleContext], StepResult]] = {
    "collect": collect, "distill": distill, "validate": validate, "measure": measure, "train": train,
    "evaluate": evaluate, "promote": promote, "specialize": specialize, "deploy": deploy}


def run_step(ctx: CycleContext, ledger: Ledger, name: str) -> dict:
    """Run one step unless the ledger has it done; record its result (and the function that made it). Exceptions
    mark the cycle failed (blocked for CycleBlocked) and propagate. Every executor runs steps through here."""
    rec = ctx.record
    if rec.done(name):
        return rec.result(name)
    if rec.status == STUCK:
        raise CycleStuck(rec)
    ctx.log(f"[cycle {rec.cycle_id}] {name} ...")
    t0 = time.monotonic()
    func = STEP_FUNCS[name]
    rec.current = {"step": name, "pid": os.getpid(), "since_wall": time.time()}
    ledger.save(rec)
    try:
        # stdout is the caller's (the demo's table, a command's JSON): library chatter goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            result = func(ctx).record()
        if os.environ.get(FAIL_AFTER_ENV) == name:
            raise InjectedFailure(f"injected failure after step {name} ({FAIL_AFTER_ENV})")
    except BaseException as e:
        error = f"{name}: {type(e).__name__}: {e}"
        rec.current = None
        if isinstance(e, CycleBlocked):
            rec.status, rec.error = BLOCKED, error[:4000]
            ledger.save(rec)
            after_cycle(ctx, ledger)
        elif isinstance(e, Exception):      # the step failed: counted, backed off, stuck after max_failures
            ledger.record_failure(rec, ctx.now(), name, error, ctx.cfg.orchestrator.max_failures)
        else:                               # interrupted (Ctrl-C, a run being stopped): not the step's failure
            rec.status, rec.error = FAILED, error[:4000]
            ledger.save(rec)
        raise
    seconds = round(time.monotonic() - t0, 2)
    rec.steps[name] = {"status": DONE, "result": result, "seconds": seconds,
                       "function": f"{func.__module__}.{func.__qualname__}", "pid": os.getpid()}
    rec.failures, rec.current = [], None    # a finished step ends the cycle's failures in a row
    ledger.save(rec)
    ctx.log(f"[cycle {rec.cycle_id}] {name} done in {seconds:.1f}s: {_brief(name, result)}")
    return result


def finish(ctx: CycleContext, ledger: Ledger) -> CycleRecord:
    rec = ctx.record
    rec.status, rec.error, rec.finished_wall = DONE, "", time.time()
    ledger.save(rec)
    after_cycle(ctx, ledger)
    return rec


def after_cycle(ctx: CycleContext, ledger: Ledger) -> None:
    """What a cycle that ended (done or blocked) leaves to clean up (infra.orchestrator.housekeeping), logged; a
    failure to clean up is reported and leaves the cycle as it ended."""
    from infra.orchestrator.housekeeping import after_cycle as clean_up

    clean_up(ctx.cfg, ledger, ctx.record, ctx.say)


def _brief(name: str, r: dict) -> str:
    if name == "specialize":
        orgs = r.get("orgs") or {}
        return ", ".join(f"{o}: {x.get('candidate') or 'skipped'} {x.get('gate') or ''}"
                         f"{' promoted' if x.get('promoted') else ''}".strip() for o, x in orgs.items()) or \
            ("off" if not r.get("enabled") else "no org")
    keys = {"collect": ("champion", "records", "as_of"), "distill": ("rows", "dead_letters", "unknown_labels"),
            "validate": ("passed",), "measure": ("measured", "rows", "versions"),
            "train": ("candidate", "parent", "reward_mean", "steps"), "evaluate": ("decision", "interval", "reasons"),
            "promote": ("promoted", "champion", "reason"),
            "deploy": ("deployed", "champion", "waited_s", "swap_load_s", "reason")}[name]
    return ", ".join(f"{k}={r.get(k)}" for k in keys if r.get(k) not in (None, ""))


def run_cycle(ctx: CycleContext, ledger: Ledger) -> CycleRecord:
    """The in-process executor: every step of the cycle in order, in this process (a resumed cycle skips the steps
    its ledger record has done)."""
    if ctx.record.status in (DONE, BLOCKED):
        ctx.log(f"[cycle {ctx.cycle_id}] already {ctx.record.status}; nothing to do")
        return ctx.record
    if ctx.record.status == STUCK:
        raise CycleStuck(ctx.record)
    for name in STEPS:
        run_step(ctx, ledger, name)
    return finish(ctx, ledger)


def context_for(cfg, cycle_id: str, now, log: Callable[[str], None] = print, ledger: Ledger | None = None,
                config_path: str | None = None, overrides: list[str] = ()) -> tuple[CycleContext, Ledger]:
    """A cycle's context and its ledger (the cycle's record begun, or the one a crashed run left)."""
    ledger = ledger or Ledger.for_config(cfg)
    rec = ledger.begin(cycle_id, now, time.time())
    return CycleContext(cfg, rec, log, config_path, list(overrides)), ledger


def step_log_dir(cfg, cycle_id: str) -> Path:
    """Where the processes a cycle's steps start (torchrun's ranks) write their logs."""
    return cfg.state_path / "orchestrator" / "logs" / cycle_id
