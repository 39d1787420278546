"""The gate: a candidate against the champion it was trained from and against the lineage's anchor, on every suite
of `gate.suites`, in order (docs/gate.md). Production's evaluate step, `rtrl gate`, the demo and the learning
benchmarks all decide with this.

    outcome = run_suites(cfg, "7", "6", registry=registry, log=print)
    outcome.decision          # "promote" only when every suite promotes
    outcome.summary()         # the decision, the reasons (each prefixed by its suite), per suite its metric,
                              # intervals against the champion and the anchor, and its power

Suites:
  tasks   the sandboxed held-out tasks, resolved rate paired by task (evals.gate_run.run_gate; an org's version
          `V@ORG` also runs its org's own suite, evals.org_gate); margins in [gate.tasks]
  users   held-out simulated users, edit persistence paired by user (`UsersGate`: each checkpoint serves the same
          users in this process's sampling workers); margins in [gate.users]

A suite that keeps the champion ends the gate: the later suites are recorded as not run. The decision is tagged on
the candidate's version after every suite ran (`gate.decision`, `gate.reasons`, `gate.champion_version`,
`gate.suites` last, and `gate.<suite>.decision`, `gate.<suite>.interval` each): a resumed cycle reads it back only
when `gate.suites` names this gate's suites.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

PROMOTE, KEEP = "promote", "keep_champion"
METRICS = {"tasks": "resolved_rate", "users": "edit_persistence_rate"}


@dataclass
class SuiteOutcome:
    suite: str
    metric: str
    decision: str                          # promote | keep_champion | not_run
    reasons: list[str] = field(default_factory=list)
    vs_champion: dict | None = None        # {"diff", "low", "high", "margin"}: the one-sided bounds' interval
    vs_anchor: dict | None = None
    power: dict | None = None              # what the suite could see (tasks: power at an equal candidate; users:
    #                                        pass probabilities at the measured standard error)
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def interval_text(self) -> str:
        v = self.vs_champion or {}
        if v.get("low") is None:
            return "n/a"
        return f"[{v['low']:+.4f}, {v['high']:+.4f}] (margin {v['margin']})"


@dataclass
class GateOutcome:
    candidate: str
    champion: str
    anchor: str | None
    suites: list[SuiteOutcome]

    @property
    def decision(self) -> str:
        ran = [s for s in self.suites if s.decision != "not_run"]
        return PROMOTE if ran and len(ran) == len(self.suites) and all(s.decision == PROMOTE for s in ran) else KEEP

    @property
    def reasons(self) -> list[str]:
        return [f"{s.suite}:{r}" for s in self.suites for r in s.reasons]

    def summary(self) -> dict:
        """The gate step's result: the decision and reasons, the first suite's interval (`interval`), each suite's
        outcome (`suites`), and the tasks suite's own summary fields when it ran (report, episodes, seconds)."""
        tasks = next((s.details for s in self.suites if s.suite == "tasks" and s.details), {})
        first = next((s for s in self.suites if s.decision != "not_run"), None)
        return {**tasks, "decision": self.decision, "reasons": self.reasons, "candidate_version": self.candidate,
                "champion_version": self.champion, "anchor_version": self.anchor,
                "interval": first.interval_text() if first else "n/a",
                "suites": [asdict(s) for s in self.suites],
                "seconds": {**tasks.get("seconds", {}), **{f"suite_{s.suite}": s.seconds for s in self.suites}}}

    def tags(self) -> dict[str, str]:
        out = {"gate.decision": self.decision, "gate.reasons": ",".join(self.reasons),
               "gate.champion_version": str(self.champion), "gate.anchor_version": self.anchor or ""}
        for s in self.suites:
            out[f"gate.{s.suite}.decision"] = s.decision
            out[f"gate.{s.suite}.interval"] = s.interval_text()
        first = next((s for s in self.suites if s.decision != "not_run"), None)
        out["gate.interval"] = first.interval_text() if first else "n/a"
        out["gate.suites"] = ",".join(s.suite for s in self.suites)   # last: the gate is complete
        return out


def _bounds(diff, low, high, margin) -> dict:
    return {"diff": diff, "low": low, "high": high, "margin": margin}


def tasks_suite(cfg, candidate: str, champion: str, registry, log, **options) -> SuiteOutcome:
    """The sandboxed held-out tasks (and an org's own suite for `V@ORG`), as `rtrl gate` ran them. On serving
    (gate.tasks.via_serving) a candidate that passes stays staged there for its promotion."""
    t0 = time.monotonic()
    if "@" in candidate:
        from evals.org_gate import run_org_gate

        run, org_run, passed = run_org_gate(cfg, candidate, champion, registry=registry, log=log, **options)
        runs = [run, org_run]
    else:
        from evals.gate_run import run_gate

        run = run_gate(cfg, candidate, champion, registry=registry, log=log, **options)
        runs, passed = [run], run.result.promote
    reasons = [r for x in runs for r in x.result.reasons]
    r = run.result
    p, a = r.primary, r.anchor
    details = run.summary()
    if len(runs) > 1:
        details["org_suite"] = runs[1].summary()
    out = SuiteOutcome(
        "tasks", METRICS["tasks"], PROMOTE if passed else KEEP, sorted(set(reasons)) if not passed else [],
        vs_champion=None if p is None else _bounds(p.difference, p.lower, p.upper, p.margin),
        vs_anchor=None if a is None else _bounds(a.difference, a.lower, a.upper, a.margin),
        power=None if r.design is None else {"power_at_equal": r.design.power_at_equal,
                                             "tasks_needed": r.design.tasks_needed,
                                             "target_power": r.design.target_power},
        seconds=round(time.monotonic() - t0, 1), details=details)
    return out


def users_suite(cfg, candidate: str, champion: str, anchor: str | None, registry, users_gate) -> SuiteOutcome:
    """Held-out simulated users (`UsersGate.decide`; an org's version on its org's users)."""
    from registry.client import parse_label

    t0 = time.monotonic()
    _, org = parse_label(candidate)
    verdict = users_gate.decide(registry, candidate, champion, anchor, org=org, tag=False)
    margin, anchor_margin = cfg.gate.users.margin, cfg.gate.users.anchor_margin
    checks = {(c["name"], c["against"]): c for c in verdict["checks"]}

    def bounds(against: str, m: float) -> dict | None:
        d = (verdict["vs_champion"] if against == "champion" else verdict["vs_anchor"] or {}).get(METRICS["users"])
        c = checks.get((METRICS["users"], against))
        if not d or d.get("diff") is None or c is None:
            return None
        return _bounds(d["diff"], c["bound"], 2 * d["diff"] - c["bound"], m)   # the bounds are symmetric

    return SuiteOutcome("users", METRICS["users"], verdict["decision"], list(verdict["reasons"]),
                        vs_champion=bounds("champion", margin), vs_anchor=bounds("anchor", anchor_margin),
                        power=verdict.get("power"), seconds=round(time.monotonic() - t0, 1),
                        details={"users": cfg.gate.users.users, "hours": cfg.gate.users.hours})


def run_suites(cfg, candidate: str, champion: str | None = None, *, registry=None,
               log: Callable[[str], None] = print, users_gate=None, work: Path | None = None,
               **task_options) -> GateOutcome:
    """Gate `candidate` on every suite of `gate.suites` (stopping at the first that keeps the champion) and tag the
    decision on it. `champion`: default what the candidate's lineage is served now. `users_gate`: a `UsersGate`
    that already served checkpoints of this lineage (the learning loop keeps one), else a new one working under
    `work` (default <state_dir>/gate/users). `task_options` go to the tasks suite (suite, max_tasks, samples,
    workers, out_dir, track). LookupError for an unknown version or no champion."""
    from registry.client import Registry, parse_label

    registry = registry or Registry.from_config(cfg)
    _, org = parse_label(candidate)
    if champion is None:
        champion = (registry.version_of(f"champion@{org}") if org else None) or registry.version_of("champion")
    if champion is None:
        raise LookupError("alias champion is not set: run `rtrl bootstrap` or pass --champion VERSION")
    alias = cfg.gate.anchor_alias
    anchor = registry.version_of(alias) if alias else None
    outcomes: list[SuiteOutcome] = []
    for suite in cfg.gate.suites:
        if outcomes and outcomes[-1].decision != PROMOTE:
            outcomes.append(SuiteOutcome(suite, METRICS[suite], "not_run"))
            continue
        log(f"[gate] suite {suite}: v{candidate} against v{champion}" + (f" and the anchor v{anchor}" if anchor
                                                                          else ""))
        if suite == "tasks":
            outcomes.append(tasks_suite(cfg, candidate, champion, registry, log, **task_options))
        else:
            if users_gate is None:
                from infra.learning.gate import UsersGate

                root = work or cfg.state_path / "gate" / "users"
                users_gate = UsersGate(cfg, 0, root / "merged", log, cache=root / "units")
            outcomes.append(users_suite(cfg, candidate, champion, anchor, registry, users_gate))
        o = outcomes[-1]
        log(f"[gate] suite {suite}: {o.decision} ({', '.join(o.reasons) or 'every check passed'}); "
            f"{o.metric} {o.interval_text()}")
    outcome = GateOutcome(candidate, champion, anchor, outcomes)
    staged = any(o.suite == "tasks" and o.decision == PROMOTE for o in outcomes) and cfg.gate.tasks.via_serving
    if staged and outcome.decision != PROMOTE:     # a later suite kept the champion: no promotion will come
        from evals.gate_run import unstage_after

        unstage_after(cfg, {"candidate": candidate}, False, log)
    if task_options.get("track", True):
        registry.set_version_tags(candidate, outcome.tags())
    return outcome
