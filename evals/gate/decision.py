"""The gate's decision: `decide(episodes, cfg) -> GateResult`, promote or keep the champion, with every number
behind it (JSON-serializable) for the report, MLflow and the promotion audit.

Promote only when all of these hold (fail closed, docs/gate.md):
  - at most `max_infra_failure_rate` of the (task, sample) pairs were lost to infrastructure failures or missing
    episodes (else reason "infra_failures");
  - at least `min_pairs` valid pairs from `min_tasks` tasks (else "too_few_pairs");
  - the one-sided non-inferiority test on resolved rate passes: the lower bound of candidate − champion at
    `confidence` is above −margin. Otherwise the reason is "inferior" when the candidate is significantly worse
    (the upper bound is below 0) and "inconclusive" when neither was shown;
  - no guardrail trips (reason "guardrail:<name>", guardrails.py);
  - with an anchor arm (the lineage's fixed reference, e.g. v0): the same non-inferiority test of the candidate
    against the anchor at `anchor_margin` passes. Otherwise "anchor:inferior" or "anchor:inconclusive": a
    lineage whose small per-cycle losses add up past the anchor margin is stopped.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import numpy as np

from evals.gate.config import TasksGateConfig
from evals.gate.guardrails import GuardrailResult, evaluate_guardrails
from evals.gate.pairs import Pairs, pair_episodes
from evals.gate.power import estimate_design, ni_power, tasks_needed
from evals.gate.stats import mcnemar_exact, paired_difference
from evals.records import Episode

PROMOTE, KEEP = "promote", "keep_champion"


@dataclass
class Counts:
    keys: int                 # (task, sample) keys seen in either arm
    valid_pairs: int
    tasks: int                # tasks with at least one valid pair
    dropped_infra: int        # keys dropped because an arm had an infrastructure failure
    unpaired: int             # keys with one arm missing
    dropped_rate: float       # (dropped_infra + unpaired) / keys: compared with max_infra_failure_rate
    episodes: dict[str, int] = field(default_factory=dict)         # per arm label
    infra_episodes: dict[str, int] = field(default_factory=dict)   # per arm label


@dataclass
class PrimaryResult:
    """Resolved rate, candidate − champion, clustered by task (stats.py)."""

    candidate_rate: float
    champion_rate: float
    difference: float
    lower: float              # one-sided bounds at `confidence` = the two-sided interval at `interval_level`
    upper: float
    interval_level: float
    confidence: float
    margin: float
    se: float
    se_cluster: float
    se_paired: float
    df: int
    p_noninferior: float      # H0: difference ≤ −margin (small = non-inferiority shown)
    p_worse: float            # H0: difference ≥ 0 (small = the candidate is significantly worse)
    candidate_only: int       # discordant pairs: resolved by the candidate only
    champion_only: int        # ... by the champion only
    mcnemar_p: float          # exact McNemar, two-sided (pairs treated as independent; for reference)
    mcnemar_p_worse: float    # exact McNemar, one-sided: the candidate resolves less often
    verdict: str              # non_inferior | inferior | inconclusive
    method: str = ""


@dataclass
class CategoryResult:
    category: str
    pairs: int
    tasks: int
    candidate_rate: float
    champion_rate: float
    difference: float
    lower: float | None       # clustered bounds when the category has pairs from ≥ 2 tasks
    upper: float | None


@dataclass
class Regression:
    """A task the champion resolved on some sample where the candidate did not."""

    task_id: str
    category: str
    lost: list[int]           # samples resolved by the champion only
    gained: list[int]         # samples resolved by the candidate only
    net: int                  # len(lost) − len(gained)


@dataclass
class Design:
    """What this suite could detect: observed discordant rate and ICC, the power an equal candidate would have
    had, and the tasks needed for `target_power` (power.py)."""

    discordant_rate: float
    icc: float
    samples_per_task: int
    power_at_equal: float
    target_power: float
    tasks_needed: int | None


@dataclass
class GateResult:
    decision: str                                   # "promote" | "keep_champion"
    reasons: list[str]                              # empty iff promote
    counts: Counts
    primary: PrimaryResult | None                   # None when there are not two tasks with valid pairs
    guardrails: list[GuardrailResult]
    categories: list[CategoryResult]
    regressions: list[Regression]                   # worst first
    design: Design | None
    candidate_versions: list[str]                   # policy_version values seen in each arm's episodes
    champion_versions: list[str]
    config: dict[str, Any]
    anchor: PrimaryResult | None = None             # candidate − anchor at anchor_margin, with an anchor arm
    anchor_versions: list[str] = field(default_factory=list)

    @property
    def promote(self) -> bool:
        return self.decision == PROMOTE

    def interval_text(self) -> str:
        p = self.primary
        if p is None:
            return "n/a"
        return f"[{p.lower:+.4f}, {p.upper:+.4f}] ({p.interval_level:.0%} two-sided; margin {p.margin})"

    def to_dict(self) -> dict[str, Any]:
        return _finite(asdict(self))

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GateResult":
        def opt(kind, v):
            return None if v is None else kind(**v)
        return cls(decision=d["decision"], reasons=list(d["reasons"]), counts=Counts(**d["counts"]),
                   primary=opt(PrimaryResult, d["primary"]),
                   guardrails=[GuardrailResult(**g) for g in d["guardrails"]],
                   categories=[CategoryResult(**c) for c in d["categories"]],
                   regressions=[Regression(**r) for r in d["regressions"]], design=opt(Design, d["design"]),
                   candidate_versions=list(d["candidate_versions"]), champion_versions=list(d["champion_versions"]),
                   config=dict(d["config"]), anchor=opt(PrimaryResult, d.get("anchor")),
                   anchor_versions=list(d.get("anchor_versions", [])))


def _finite(x: Any) -> Any:
    """NaN/inf -> None, numpy scalars -> Python: strict JSON everywhere."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _primary(pairs: Pairs, cfg: TasksGateConfig) -> PrimaryResult:
    d = paired_difference(pairs.column("candidate", "resolved"), pairs.column("champion", "resolved"),
                          pairs.cluster, cfg.confidence)
    m = mcnemar_exact(d.a_only, d.b_only)
    verdict = ("non_inferior" if d.lower > -cfg.margin else "inferior" if d.upper < 0 else "inconclusive")
    return PrimaryResult(d.rate_a, d.rate_b, d.estimate, d.lower, d.upper, d.interval_level, cfg.confidence,
                         cfg.margin, d.se, d.se_cluster, d.se_paired, d.df, d.p_above(-cfg.margin), d.p_below(0.0),
                         d.a_only, d.b_only, m.p_two_sided, m.p_a_worse, verdict,
                         f"cluster-robust paired difference (task clusters), t on {d.df} df, Agresti-Min floor")


def _categories(pairs: Pairs, cfg: TasksGateConfig) -> list[CategoryResult]:
    cats = np.array([c.category or h.category for c, h in zip(pairs.candidate, pairs.champion)], dtype=object)
    a, b = pairs.column("candidate", "resolved"), pairs.column("champion", "resolved")
    out = []
    for cat in sorted(set(cats)):
        mask = cats == cat
        tasks = len(np.unique(pairs.cluster[mask]))
        lo = hi = None
        if tasks >= 2:
            d = paired_difference(a[mask], b[mask], pairs.cluster[mask], cfg.confidence)
            lo, hi = d.lower, d.upper
        out.append(CategoryResult(cat, int(mask.sum()), tasks, float(a[mask].mean()), float(b[mask].mean()),
                                  float(a[mask].mean() - b[mask].mean()), lo, hi))
    return out


def _regressions(pairs: Pairs) -> list[Regression]:
    per_task: dict[str, Regression] = {}
    for c, h in zip(pairs.candidate, pairs.champion):
        if c.resolved == h.resolved:
            continue
        r = per_task.setdefault(c.task_id, Regression(c.task_id, c.category or h.category, [], [], 0))
        (r.lost if h.resolved else r.gained).append(c.sample)
    out = [r for r in per_task.values() if r.lost]
    for r in out:
        r.net = len(r.lost) - len(r.gained)
    return sorted(out, key=lambda r: (-r.net, -len(r.lost), r.task_id))


def _design(pairs: Pairs, cfg: TasksGateConfig) -> Design:
    d = pairs.column("candidate", "resolved") - pairs.column("champion", "resolved")
    disc, icc = estimate_design(d, pairs.cluster)
    k = max(1, round(pairs.n / pairs.n_tasks))
    power = ni_power(pairs.n_tasks, k, cfg.margin, cfg.confidence, disc, 0.0, icc)
    need = tasks_needed(cfg.target_power, k, cfg.margin, cfg.confidence, disc, 0.0, icc)
    return Design(disc, icc, k, power, cfg.target_power, need)


def decide(episodes: Iterable[Episode], cfg: TasksGateConfig | None = None, candidate: str = "candidate",
           champion: str = "champion", anchor: str | None = None) -> GateResult:
    """Compare arm `candidate` with arm `champion` over `episodes` (one per task, sample and arm; see
    evals/records.py) and decide; with `anchor`, the candidate must also be non-inferior to that arm at
    `cfg.anchor_margin`. Deterministic for the same episodes and config (the bootstrap is seeded)."""
    cfg = cfg or TasksGateConfig()
    episodes = list(episodes)
    anchor_eps = [e for e in episodes if e.arm == anchor]     # none without an anchor (arms are never None)
    episodes = [e for e in episodes if e.arm != anchor]
    pairs = pair_episodes(episodes, candidate, champion)
    reasons: list[str] = []
    if pairs.dropped_rate > cfg.max_infra_failure_rate:
        reasons.append("infra_failures")
    if pairs.n < cfg.min_pairs or pairs.n_tasks < cfg.min_tasks:
        reasons.append("too_few_pairs")
    primary = design = None
    guardrails: list[GuardrailResult] = []
    categories: list[CategoryResult] = []
    if pairs.n_tasks >= 2:   # below two tasks no clustered interval exists: too_few_pairs already keeps
        primary = _primary(pairs, cfg)
        if primary.verdict != "non_inferior":
            reasons.append("inferior" if primary.verdict == "inferior" else "inconclusive")
        guardrails = evaluate_guardrails(pairs, cfg)
        reasons += [f"guardrail:{g.name}" for g in guardrails if not g.passed]
        categories = _categories(pairs, cfg)
        design = _design(pairs, cfg)

    anchored = None
    if anchor is not None:
        anchored = _against_anchor(episodes, anchor_eps, candidate, anchor, cfg)
        if anchored is None or anchored.verdict != "non_inferior":
            reasons.append(f"anchor:{'inconclusive' if anchored is None else anchored.verdict}")

    def versions(arm: str, eps: list[Episode]) -> list[str]:
        return sorted({e.policy_version for e in eps if e.arm == arm and e.policy_version})

    counts = Counts(pairs.total, pairs.n, pairs.n_tasks, pairs.dropped_infra, pairs.unpaired, pairs.dropped_rate,
                    pairs.episodes, pairs.infra_episodes)
    return GateResult(PROMOTE if not reasons else KEEP, reasons, counts, primary, guardrails, categories,
                      _regressions(pairs), design, versions(candidate, episodes), versions(champion, episodes),
                      cfg.model_dump(), anchored, versions(anchor, anchor_eps) if anchor else [])


def _against_anchor(episodes: list[Episode], anchor_eps: list[Episode], candidate: str, anchor: str,
                    cfg: TasksGateConfig) -> PrimaryResult | None:
    """The primary test of the candidate against the anchor arm, at `anchor_margin`; None when fewer than two
    tasks have a valid pair (nothing can be shown: fail closed)."""
    pairs = pair_episodes([e for e in episodes if e.arm == candidate] + anchor_eps, candidate, anchor)
    if pairs.n_tasks < 2:
        return None
    return _primary(pairs, cfg.model_copy(update={"margin": cfg.anchor_margin}))
