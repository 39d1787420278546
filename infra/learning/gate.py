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

from evals.episode_cache import touch
from infra.learning.checkpoints import servable
from infra.learning.score import CURVE_METRICS, served_units


class UsersGate:
    """Decides candidates on the lineage's held-out gate users. `merged`: the folder where an adapter version is
    merged into its base to be served in-process. `cache`: a folder where each checkpoint's unit sums are kept by
    its content digest and everything else they depend on (the users, the hours, the reward spec, the sampling), so
    that the champion and the anchor are served once across gates (none: in memory only); a file read is touched,
    and retention (`gate.keep_cached_versions`) evicts the least recently used."""

    def __init__(self, cfg, seed: int, merged: Path, log: Callable[[str], None] = lambda m: None, workers=None,
                 cache: Path | None = None):
        from infra.learning.score import sampling_of

        self.cfg = cfg.gate.users
        self.sim = cfg.simulator.model_copy(update={"users": self.cfg.users, "seed": self.cfg.seed + seed})
        self.spec, self.log, self.jobs = cfg.rewards, log, workers or cfg.learning.serving_jobs()
        self.sampling = sampling_of(cfg)
        self.merged, self.cache = merged, cache
        # (version, org or None) -> its unit sums on the gate users (of that org), each served once
        self.units: dict[tuple[str, str | None], pl.DataFrame] = {}

    def _units(self, registry, version: str, org: str | None = None) -> pl.DataFrame:
        """`version`'s unit sums on the gate users, or on org `org`'s: from its run on every user when there was
        one, else a run on the org's users only (an org's adapter serves only its own)."""
        if (version, None) in self.units:
            units = self.units[(version, None)]
            return units if org is None else units.filter(pl.col("org_id") == org)
        if (version, org) not in self.units:
            kept = self._kept(registry, version, org)
            if kept is not None and kept.is_file():
                self.units[(version, org)] = pl.read_parquet(kept)
                touch(kept)      # used now: retention evicts the least recently used (infra/retention/stores.py)
                return self.units[(version, org)]
            folder = servable(registry, version, self.merged)
            only = None if org is None else self.sim.users_of(org)
            units = served_units(folder, version, self.sim, self.spec, self.cfg.hours, self.jobs, only=only,
                                 **self.sampling)[0]
            if kept is not None:
                kept.parent.mkdir(parents=True, exist_ok=True)
                units.write_parquet(kept.with_suffix(".tmp"))
                kept.with_suffix(".tmp").replace(kept)
            self.units[(version, org)] = units
        return self.units[(version, org)]

    def _kept(self, registry, version: str, org: str | None) -> Path | None:
        """Where `version`'s unit sums on these users are kept, by what they depend on; None without a cache or a
        content digest."""
        import hashlib
        import json

        info = registry.info(version) if self.cache is not None else None
        if info is None or not info.digest:
            return None
        base = info.tags.get("lora_base")    # an adapter is served merged into its base
        key = json.dumps({"digest": info.digest, "base": base and registry.info(base).digest, "org": org,
                          "sim": self.sim.model_dump(mode="json"),
                          "hours": self.cfg.hours, "spec": self.spec.version(), "sampling": self.sampling},
                         sort_keys=True)
        return self.cache / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.parquet"

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
