"""The learning loop's gate: each checkpoint serves the lineage's held-out gate users once; the candidate is decided
against the champion and the anchor (v0) by `evals.gate.users.decide_on_users`, and the decision is tagged on the
candidate's version as `rtrl gate` tags it (`gate.decision`, `gate.champion_version`: promotion's compare-and-swap
reads them).

The gate users (`gate.users.seed` + the lineage's seed) are neither a training population nor the scoring users
the learning curve is measured on, so a candidate chosen on them is not measured on the users that chose it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import polars as pl

from infra.learning.checkpoints import servable
from infra.learning.score import CURVE_METRICS, served_units


class UsersGate:
    """Decides candidates on the lineage's held-out gate users. `merged`: the folder where an adapter version is
    merged into its base to be served in-process."""

    def __init__(self, cfg, seed: int, merged: Path, log: Callable[[str], None] = lambda m: None, workers=None):
        self.cfg = cfg.gate.users
        self.sim = cfg.simulator.model_copy(update={"users": self.cfg.users, "seed": self.cfg.seed + seed})
        self.spec, self.log, self.jobs = cfg.rewards, log, workers or cfg.learning.serving_jobs()
        self.merged = merged
        # (version, org or None) -> its unit sums on the gate users (of that org), each served once
        self.units: dict[tuple[str, str | None], pl.DataFrame] = {}

    def _units(self, registry, version: str, org: str | None = None) -> pl.DataFrame:
        """`version`'s unit sums on the gate users, or on org `org`'s: from its run on every user when there was
        one, else a run on the org's users only (an org's adapter serves only its own)."""
        if (version, None) in self.units:
            units = self.units[(version, None)]
            return units if org is None else units.filter(pl.col("org_id") == org)
        if (version, org) not in self.units:
            folder = servable(registry, version, self.merged)
            only = None if org is None else self.sim.users_of(org)
            self.units[(version, org)] = served_units(folder, version, self.sim, self.spec, self.cfg.hours,
                                                      self.jobs, only=only)[0]
        return self.units[(version, org)]

    def _vs(self, base: pl.DataFrame, other: pl.DataFrame) -> dict:
        from infra.offline_ab import paired_units_difference

        alpha = 2 * (1 - self.cfg.confidence)      # the two-sided interval whose ends are the one-sided bounds
        metrics = dict.fromkeys([*CURVE_METRICS, *self.cfg.guardrails])
        return {m: paired_units_difference(base, other, m, alpha) for m in metrics}

    def decide(self, registry, candidate: str, champion: str, anchor: str | None, org: str | None = None,
               tag: bool = True) -> dict:
        """The candidate against the champion (and the anchor, unless None) on the gate users; with `org`, on that
        org's users only (an org's adapter `<v>@<org>` against what the org is served). With `tag` the decision is
        tagged on the candidate as this suite's alone (`infra.gate_suites` tags the whole gate's instead)."""
        from evals.gate.users import PRIMARY, decide_on_users, power_report

        cand = self._units(registry, candidate, org)
        vs_champion = self._vs(self._units(registry, champion, org), cand)
        vs_anchor = None if anchor is None else self._vs(self._units(registry, anchor, org), cand)
        verdict = decide_on_users(vs_champion, vs_anchor, self.cfg)
        p = vs_champion[PRIMARY]
        interval = "" if p["diff"] is None else f"[{p['ci_low']:.4f}, {p['ci_high']:.4f}]"
        if tag:
            registry.set_version_tags(candidate, {
                "gate.decision": verdict.decision, "gate.reasons": ",".join(verdict.reasons),
                "gate.champion_version": champion, "gate.anchor_version": anchor or "", "gate.metric": "users",
                "gate.interval": interval, "gate.run_id": "bench-learning"})
        return {"decision": verdict.decision, "reasons": verdict.reasons,
                "checks": [c.__dict__ for c in verdict.checks], "power": power_report(p["se"], self.cfg),
                "vs_champion": vs_champion, "vs_anchor": vs_anchor}
