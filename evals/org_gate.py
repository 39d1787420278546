"""An org's specialized candidate through the gate (docs/gate.md, "Specialized candidates"): the held-out suite, as
every candidate, and that org's own held-out tasks; it passes only when both pass.

    run, org_run, passed = run_org_gate(cfg, "3@acme")

The champion it is compared with is what the org's users are served now: the org's champion (`champion@acme`),
else the shared champion. The first gate tags the candidate as any gate does (gate.*, read by `rtrl promote`); the
second adds `gate.org_suite.*`, and when it fails turns `gate.decision` into keep_champion with its reasons.

The org's suite: `<gate.tasks.org_suites_dir>/<org>/` when set; else, for the simulator's orgs (`o<N>`), tasks generated
in that org's workspaces with its id, naming convention and house rule (`generate_suite(org=...)` with
`simulator.org`'s Org; seeds training never draws), its requests phrased as the org's users phrase them, made
once under `gate.tasks.suites_root` (default: the state dir's eval-suites/). The held-out suite's phrasings are held out
from training, and the default v0 resolves none of its renames, new parameters or constant changes: that suite
alone could not see an org's rule being learned.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from codetasks.workspace import ORG_ID
from evals.gate_run import COMPLETE, GateRun, run_gate, suites_root, unstage_after


def org_suite(cfg, org: str, log: Callable[[str], None] = lambda m: None) -> Path:
    """The folder of `org`'s own suite (see the module docstring). LookupError when there is none."""
    from evals.tasks.generate import generate_suite

    g = cfg.gate.tasks
    if g.org_suites_dir:
        d = Path(g.org_suites_dir).expanduser().resolve() / org
        if not d.is_dir():
            raise LookupError(f"org {org} has no suite in gate.tasks.org_suites_dir ({d} is missing)")
        return d
    m = ORG_ID.match(org)
    if m is None:
        raise LookupError(f"org {org} has no suite: set gate.tasks.org_suites_dir to a folder with a suite per org")
    conventions = cfg.simulator.org(int(m.group(1)))
    rule = {True: "-kwonly", False: "-positional", None: ""}[conventions.kwonly]
    d = suites_root(cfg) / f"org-{org}-{conventions.style}{rule}-traffic-n{g.org_suite_tasks}-seed{g.suite_seed}"
    if not (d / COMPLETE).exists():
        log(f"[gate] generating org {org}'s suite: {g.org_suite_tasks} tasks ({conventions.style}{rule}) in {d}")
        generate_suite(d, g.org_suite_tasks, seed=g.suite_seed, org=conventions, split="train")
        (d / COMPLETE).write_text(datetime.now(timezone.utc).isoformat() + "\n")
    return d


def run_org_gate(cfg, candidate: str, champion: str | None = None, *, registry=None, track: bool = True,
                 log: Callable[[str], None] | None = None, **options) -> tuple[GateRun, GateRun, bool]:
    """Gate the org version `candidate` (`<v>@<org>`) on both suites; (the held-out run, the org-suite run, whether
    it may be promoted). `options` go to both `run_gate` calls (samples, workers, ...); `max_tasks` (default
    gate.tasks.org_max_tasks) to the held-out one, samples default to `GateConfig.org_samples`."""
    from registry.client import Registry, parse_label

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    _, org = parse_label(candidate)
    if org is None:
        raise LookupError(f"{candidate} is not an org's version (<version>@<org>)")
    registry = registry or Registry.from_config(cfg)
    champion = champion or registry.version_of(f"champion@{org}") or registry.version_of("champion")
    suite = org_suite(cfg, org, log)
    g = cfg.gate.tasks
    max_tasks = options.pop("max_tasks", None) or g.org_max_tasks or None
    options["samples"] = options.get("samples") or g.org_samples
    run = run_gate(cfg, candidate, champion, registry=registry, track=track, log=log, max_tasks=max_tasks,
                   **options)
    log(f"[gate] org {org}: its own suite ({suite.name})")
    org_run = run_gate(cfg, candidate, champion, suite=suite, registry=registry, track=False, log=log,
                       out_dir=run.out_dir / "org-suite", **options)
    passed = bool(run.result.promote and org_run.result.promote)
    if cfg.gate.tasks.via_serving and run.result.promote and not passed:   # the held-out run left it staged for a
        unstage_after(cfg, {"candidate": candidate}, False, log)       # promotion that will not come
    if track:
        tags = {"gate.org_suite.decision": org_run.result.decision,
                "gate.org_suite.interval": org_run.result.interval_text(),
                "gate.org_suite.report": str(org_run.out_dir)}
        if run.result.promote and not passed:
            tags |= {"gate.decision": "keep_champion",
                     "gate.reasons": f"org {org}'s own suite: {'; '.join(org_run.result.reasons) or 'not passed'}"}
        registry.set_version_tags(candidate, tags)
    return run, org_run, passed
