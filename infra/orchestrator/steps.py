"""One cycle's steps, each idempotent by cycle id (docs/orchestrator.md):

    collect   fix the Kafka offset range since the last cycle (the reward job's manifest) and the champion that
              served it
    distill   the Beam reward job over that range (`rtrl rewards --cycle ID`): reward rows, window = the cycle id
    validate  the data-quality suite over the cycle's rows (`rtrl quality`); a failure blocks the cycle
    measure   the cycle's A/B metrics, treatment vs control (pipelines.metrics) -> <state_dir>/ab (the dashboard)
    train     the champion on the cycle's rows (`rtrl train --cycle ID --window ID`): a candidate version; on
              `trainer.ranks` ranks (the command starts them under torchrun; rank 0 registers the one candidate)
    evaluate  the gate, candidate vs the champion it was trained from (`rtrl gate`)
    promote   compare-and-swap `champion` to the candidate when the gate passed
    specialize  with `specialize.enabled`, per org (`specialize.orgs`, else every org in the cycle's rows): its
              adapter on its rows over the shared champion (`rtrl train --org`), its gate (`rtrl gate V@ORG`: the
              held-out suite and its own; `specialize.parallel_gates` orgs at once) and the compare-and-swap of
              `champion@ORG`; an org with too few usable rows is skipped this cycle
    deploy    serving reports the new champion on its treatment arm (blue/green hot swap; a switch without a load
              when the gate staged the candidate there), or, when the champion stayed, that serving still serves it

`run_cycle(ctx)` runs the steps in order and records each in the ledger; a cycle that crashed is resumed by
running the same cycle id again. Why a rerun never doubles work or data, per step: the reward job keeps its own
manifest per cycle id (a started range is read again, a done one is not run again); rows are partitioned by
window = cycle id and written by overwrite; `rtrl train` finds the candidate already registered for the cycle;
the gate's decision is read back from the candidate's gate.* tags when it ran against the same champion; the
promotion is a compare-and-swap (already champion = done); deploy only observes.

Failure injection for tests: `RTRL_FAIL_AFTER_STEP=<step>` raises InjectedFailure after that step's work and
before the ledger records it — the worst moment, so the resumed run must rely on the step's own idempotency.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from infra.orchestrator.ledger import BLOCKED, DONE, FAILED, CycleRecord, Ledger
from infra.orchestrator.rtrl_cli import RtrlCli, StepFailed

STEPS = ("collect", "distill", "validate", "measure", "train", "evaluate", "promote", "specialize", "deploy")
FAIL_AFTER_ENV = "RTRL_FAIL_AFTER_STEP"


class InjectedFailure(RuntimeError):
    """Raised after a step's work when RTRL_FAIL_AFTER_STEP names it (tests of resumption)."""


class CycleBlocked(StepFailed):
    """The cycle cannot go on with this data (a data-quality suite failed, too few usable rows)."""


@dataclass
class CycleContext:
    cfg: object                       # infra.config.RtrlConfig
    cli: RtrlCli
    record: CycleRecord
    log: Callable[[str], None] = print

    @property
    def cycle_id(self) -> str:
        return self.record.cycle_id

    def registry(self):
        from registry.client import Registry

        return Registry.from_config(self.cfg)


PROGRESS_PREFIXES = ("[gate] ", "train ", "rewards ")


def _progress(ctx: CycleContext) -> Callable[[str], None]:
    """Echo a step command's own progress lines (the rest stays in its log file)."""
    def echo(line: str) -> None:
        if line.startswith(PROGRESS_PREFIXES):
            ctx.log(f"[cycle {ctx.cycle_id}]   {line}")
    return echo


def collect(ctx: CycleContext) -> dict:
    from pipelines.rewards.cycle_job import CycleStore, plan

    champion = ctx.registry().version_of("champion")
    if champion is None:
        raise StepFailed("alias champion is not set: run `rtrl bootstrap` first")
    m = plan(CycleStore(ctx.cfg.rewards_root()), ctx.cycle_id, ctx.cfg.kafka, ctx.cfg.rewards,
             ctx.cfg.orchestrator.range_idle_s, ctx.log)
    return {"champion": champion, "records": m.range["records"], "reward_cycle_seq": m.seq, "after": m.after,
            "as_of": m.as_of}


def distill(ctx: CycleContext) -> dict:
    _, out = ctx.cli.run("rewards", "--cycle", ctx.cycle_id, step="distill", echo=_progress(ctx))
    r = out["rewards"]
    return {k: r[k] for k in ("rows", "records_in_range", "as_of", "after", "dead_letters", "duplicates_dropped",
                              "unknown_labels", "late_events", "requests_pending", "out") if k in r}


def validate(ctx: CycleContext) -> dict:
    table = ctx.record.result("distill").get("out") or str(ctx.cfg.reward_table())
    report = ctx.cfg.state_path / "quality" / ctx.cycle_id
    code, _ = ctx.cli.run("quality", "--rewards", table, "--window", ctx.cycle_id, "--report", str(report),
                          step="validate", ok_codes=(0, 3), expect_json=False)
    suites = json.loads((report / "report.json").read_text()).get("suites", [])
    failed = {x.get("name", "?"): sum(not r.get("success", True) for r in x.get("results", []))
              for x in suites if not x.get("success", True)}      # suite -> rules that failed
    if code == 3:
        raise CycleBlocked(f"data quality failed for cycle {ctx.cycle_id}: {failed}; training on it is blocked "
                           f"(report: {report / 'report.html'})", code)
    return {"passed": True, "report": str(report / "report.html"), "suites": len(suites)}


def measure(ctx: CycleContext) -> dict:
    from pipelines.metrics import MetricsStore, compute_cycle_metrics, scan_cycle

    table = ctx.record.result("distill").get("out") or str(ctx.cfg.reward_table())
    try:
        rows = scan_cycle(table, ctx.cycle_id)
    except FileNotFoundError as e:
        return {"measured": False, "reason": str(e)}
    store = MetricsStore.for_state_dir(ctx.cfg.state_path)
    res = compute_cycle_metrics(rows, ctx.cycle_id, as_of=ctx.record.result("collect").get("as_of"),
                                config=ctx.cfg.ab, store=store)
    store.write(ctx.cycle_id, res)
    out = {"measured": True, "rows": res.counts.get("rows_used"), "versions": res.versions,
           "srm_flagged": bool(res.srm.get("flagged"))}
    for name in ("edit_persistence_rate", "dissatisfied_followup_rate"):
        m = res.metric(name)
        out[name] = {"control": m.control, "treatment": m.treatment, "change": m.change, "low": m.low,
                     "high": m.high}
    return out


def train(ctx: CycleContext) -> dict:
    args = ["train", "--cycle", ctx.cycle_id, "--window", ctx.cycle_id]
    as_of = ctx.record.result("collect").get("as_of")
    if as_of:
        args += ["--as-of", as_of]
    try:
        _, out = ctx.cli.run(*args, step="train", echo=_progress(ctx))
    except StepFailed as e:
        if e.code == 2:   # selection refused the data (too few usable rows, immature rows): not a crash
            raise CycleBlocked(str(e), 2) from None
        raise
    t = out["train"]
    return {k: t.get(k) for k in ("candidate", "parent", "counts", "steps", "tokens", "reward_mean", "seconds",
                                  "loop_seconds", "already_done")}


def evaluate(ctx: CycleContext) -> dict:
    candidate, parent = ctx.record.result("train")["candidate"], ctx.record.result("train")["parent"]
    tags = ctx.registry().info(candidate).tags
    if tags.get("gate.decision") and tags.get("gate.champion_version") == str(parent):
        ctx.log(f"[cycle {ctx.cycle_id}] evaluate: version {candidate} was already gated against {parent}: "
                f"{tags['gate.decision']}")
        return {"decision": tags["gate.decision"], "reasons": [r for r in tags.get("gate.reasons", "").split(",")
                                                               if r],
                "interval": tags.get("gate.interval"), "mlflow_run_id": tags.get("gate.run_id"),
                "candidate_version": candidate, "champion_version": str(parent), "reused": True}
    _, out = ctx.cli.run("gate", str(candidate), "--champion", str(parent), step="evaluate", ok_codes=(0, 3),
                         echo=_progress(ctx))
    return out["gate"]


def promote(ctx: CycleContext) -> dict:
    from registry.promotion import PromotionRefused, lock_path_for
    from registry.promotion import promote as cas_promote

    gate = ctx.record.result("evaluate")
    candidate = str(ctx.record.result("train")["candidate"])
    registry = ctx.registry()
    if gate.get("decision") != "promote":
        return {"promoted": False, "champion": registry.version_of("champion"),
                "reason": f"gate: {gate.get('decision')} ({', '.join(gate.get('reasons') or []) or 'no reason'})"}
    if registry.version_of("champion") == candidate:
        return {"promoted": True, "champion": candidate, "already": True}
    try:
        res = cas_promote(registry, candidate, lock_path_for(ctx.cfg.mlflow_tracking_uri(), ctx.cfg.state_path))
    except PromotionRefused as e:
        return {"promoted": False, "champion": registry.version_of("champion"), "reason": f"refused: {e}"}
    return {"promoted": True, "champion": res.champion, "previous": res.previous}


def cycle_orgs(ctx: CycleContext) -> list[str]:
    """`specialize.orgs`, else the orgs of the cycle's reward rows."""
    if ctx.cfg.specialize.orgs:
        return list(ctx.cfg.specialize.orgs)
    import polars as pl

    from schemas.reward_table import read_reward_table

    rows = read_reward_table(ctx.cfg.reward_table(), ctx.cycle_id)
    return sorted(rows.select(pl.col("org_id").unique())["org_id"].to_list())


def _gated(ctx: CycleContext, label: str, against: str | None) -> dict | None:
    """The gate result recorded on `label` when it was gated against `against` already (a resumed cycle)."""
    tags = ctx.registry().info(label).tags
    if tags.get("gate.decision") and "gate.org_suite.decision" in tags and tags.get("gate.champion_version") == \
            str(against):
        return {"decision": tags["gate.decision"], "interval": tags.get("gate.interval"), "reused": True}
    return None


def train_org(ctx: CycleContext, org: str) -> dict:
    """One org's adapter trained (idempotent: a resumed cycle finds its candidate); `trained` False when the org
    has too few usable rows this cycle."""
    args = ["train", "--cycle", ctx.cycle_id, "--window", ctx.cycle_id, "--org", org]
    as_of = ctx.record.result("collect").get("as_of")
    if as_of:
        args += ["--as-of", as_of]
    try:
        _, out = ctx.cli.run(*args, step=f"specialize-{org}", echo=_progress(ctx))
    except StepFailed as e:
        if e.code == 2:   # too few usable rows (or immature ones): this org waits for the next cycle
            return {"trained": False, "reason": str(e).splitlines()[-1][:300]}
        raise
    t = out["train"]
    return {"trained": True, "candidate": f"{t['candidate']}@{org}", "parent": t.get("parent"),
            "rows": (t.get("counts") or {})}


def gate_org(ctx: CycleContext, org: str, trained: dict) -> dict:
    """The gate of an org's trained candidate against what the org is served now (read back on a resumed cycle):
    {decision, interval}, or {"already": True} when its lineage's champion is the candidate already."""
    from registry.client import parse_label

    label = trained["candidate"]
    registry = ctx.registry()
    if registry.for_org(org).version_of("champion") == parse_label(label)[0]:   # a resumed cycle promoted it
        return {"decision": "promote", "already": True}
    gate = _gated(ctx, label, registry.version_of(f"champion@{org}") or registry.version_of("champion"))
    if gate is None:
        _, gout = ctx.cli.run("gate", label, step=f"specialize-{org}", ok_codes=(0, 3), echo=_progress(ctx))
        gate = {"decision": gout["gate"]["decision"], "interval": gout["gate"].get("interval")}
    return gate


def promote_org(ctx: CycleContext, org: str, trained: dict, gate: dict) -> dict:
    """The compare-and-swap of champion@org for a candidate its gate passed."""
    from registry.client import parse_label
    from registry.promotion import PromotionRefused, lock_path_for
    from registry.promotion import promote as cas_promote

    label = trained["candidate"]
    if gate.get("already"):
        return trained | {"gate": "promote", "promoted": True, "champion": label, "already": True}
    registry = ctx.registry()
    result = trained | {"gate": gate.get("decision"), "interval": gate.get("interval")}
    if gate.get("decision") != "promote":
        return result | {"promoted": False, "champion": registry.version_of(f"champion@{org}")}
    try:
        cas_promote(registry.for_org(org), parse_label(label)[0],
                    lock_path_for(ctx.cfg.mlflow_tracking_uri(), ctx.cfg.state_path))
    except PromotionRefused as e:
        return result | {"promoted": False, "reason": f"refused: {e}"}
    return result | {"promoted": True, "champion": label}


def specialize(ctx: CycleContext) -> dict:
    """Per org: train (one at a time: each trainer takes the trainer's cores), then gate the trained candidates,
    `specialize.parallel_gates` at once, then promote each that passed."""
    from concurrent.futures import ThreadPoolExecutor

    if not ctx.cfg.specialize.enabled:
        return {"enabled": False}
    trained = {org: train_org(ctx, org) for org in cycle_orgs(ctx)}
    ready = [org for org, t in trained.items() if t["trained"]]
    with ThreadPoolExecutor(max_workers=ctx.cfg.specialize.parallel_gates) as pool:
        gates = dict(zip(ready, pool.map(lambda org: gate_org(ctx, org, trained[org]), ready)))
    return {"enabled": True, "orgs": {org: promote_org(ctx, org, t, gates[org]) if org in gates else t
                                      for org, t in trained.items()}}


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


def deploy(ctx: CycleContext) -> dict:
    champion = str(ctx.record.result("promote").get("champion"))
    status = serving_status(ctx.cfg)
    if status is None:
        return {"deployed": False, "champion": champion,
                "reason": "serving is not running; it serves the champion alias when started"}
    deadline = time.monotonic() + ctx.cfg.orchestrator.deploy_timeout_s
    t0 = time.monotonic()
    while True:
        arms = arms_on(status, "champion")
        if arms and all(v == champion for v in arms.values()):
            out = {"deployed": True, "champion": champion, "arms": arms, "waited_s": round(time.monotonic() - t0, 1)}
            swap = [s for s in status.get("swaps", []) if str(s.get("to_version")) == champion]
            if swap:
                out["swap_load_s"] = swap[-1].get("load_s")
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


STEP_FUNCS: dict[str, Callable[[CycleContext], dict]] = {
    "collect": collect, "distill": distill, "validate": validate, "measure": measure, "train": train,
    "evaluate": evaluate,
    "promote": promote, "specialize": specialize, "deploy": deploy}


def run_step(ctx: CycleContext, ledger: Ledger, name: str) -> dict:
    """Run one step unless the ledger has it done; record it. Exceptions mark the cycle failed and propagate."""
    rec = ctx.record
    if rec.done(name):
        return rec.result(name)
    ctx.log(f"[cycle {rec.cycle_id}] {name} ...")
    t0 = time.monotonic()
    try:
        result = STEP_FUNCS[name](ctx)
        if os.environ.get(FAIL_AFTER_ENV) == name:
            raise InjectedFailure(f"injected failure after step {name} ({FAIL_AFTER_ENV})")
    except BaseException as e:
        rec.status = BLOCKED if isinstance(e, CycleBlocked) else FAILED
        rec.error = f"{name}: {type(e).__name__}: {e}"[:4000]
        ledger.save(rec)
        raise
    seconds = round(time.monotonic() - t0, 2)
    rec.steps[name] = {"status": DONE, "result": result, "seconds": seconds}
    ledger.save(rec)
    ctx.log(f"[cycle {rec.cycle_id}] {name} done in {seconds:.1f}s: {_brief(name, result)}")
    return result


def finish(ctx: CycleContext, ledger: Ledger) -> CycleRecord:
    rec = ctx.record
    rec.status, rec.error, rec.finished_wall = DONE, "", time.time()
    ledger.save(rec)
    return rec


def _brief(name: str, r: dict) -> str:
    if name == "specialize":
        orgs = r.get("orgs") or {}
        return ", ".join(f"{o}: {x.get('candidate') or 'skipped'} {x.get('gate') or ''}"
                         f"{' promoted' if x.get('promoted') else ''}".strip() for o, x in orgs.items()) or \
            ("off" if not r.get("enabled") else "no org")
    keys = {"collect": ("champion", "records", "as_of"), "distill": ("rows", "dead_letters", "unknown_labels"),
            "validate": ("passed",), "measure": ("measured", "rows", "versions"), "train": ("candidate", "parent", "reward_mean", "steps"),
            "evaluate": ("decision", "interval", "reasons"), "promote": ("promoted", "champion", "reason"),
            "deploy": ("deployed", "champion", "waited_s", "swap_load_s", "reason")}[name]
    return ", ".join(f"{k}={r.get(k)}" for k in keys if k in r)


def run_cycle(ctx: CycleContext, ledger: Ledger) -> CycleRecord:
    if ctx.record.status in (DONE, BLOCKED):
        ctx.log(f"[cycle {ctx.cycle_id}] already {ctx.record.status}; nothing to do")
        return ctx.record
    for name in STEPS:
        run_step(ctx, ledger, name)
    return finish(ctx, ledger)


def context_for(cfg, cli: RtrlCli, cycle_id: str, now, log: Callable[[str], None] = print,
                ledger: Ledger | None = None) -> tuple[CycleContext, Ledger]:
    ledger = ledger or Ledger.for_config(cfg)
    rec = ledger.begin(cycle_id, now, time.time())
    return CycleContext(cfg, cli, rec, log), ledger


def step_log_dir(cfg, cycle_id: str) -> Path:
    return cfg.state_path / "orchestrator" / "logs" / cycle_id
