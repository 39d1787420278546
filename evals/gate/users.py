"""The gate's decision on simulated users' outcomes: candidate against champion and against the lineage's anchor.

The held-out suite resolves few tasks with a small policy, so its interval is too wide to see a drop of a few
points (docs/gate.md, "Power"). Held-out simulated users resolve one: every checkpoint serves the same users (a
population training traffic never draws), and each metric's difference pairs each user's rows under the two
checkpoints (the A/B table's per-user ratio metric, delta method; `infra.offline_ab.paired_units_difference`
computes it). The caller passes those paired differences; this module only decides, fail closed:

  primary     edit persistence, candidate − champion: the one-sided lower bound at `confidence` is above −margin
  anchor      edit persistence, candidate − anchor: the lower bound is above −anchor_margin. The anchor (v0, the
              lineage's fixed reference) never moves, so the margin is spent once over the lineage: a chain of
              candidates each a little worse than its parent stops once it is anchor_margin below the anchor
  guardrails  each guardrail metric, candidate − champion: blocks when the data show it worse by more than its
              margin (the lower bound of the increase above the margin), as the suite gate's guardrails do

A missing comparison or an undefined difference (no rows) keeps the champion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict, Field

PRIMARY = "edit_persistence_rate"


class UsersGateConfig(BaseModel):
    """`[gate.users]`: the gate on held-out simulated users (`rtrl bench learning`'s loop decides with it)."""

    model_config = ConfigDict(extra="forbid")

    users: int = Field(default=128, ge=2, le=10_000, description="Held-out simulated users every checkpoint of a "
                       "lineage serves (the same users, paired by user).")
    hours: float = Field(default=2.0, gt=0, le=48, description="Simulated hours of each checkpoint's run.")
    seed: int = Field(default=700_000, ge=0, description="Their population seed (a lineage of seed k adds k): "
                      "never a training or scoring population's.")
    margin: float = Field(default=0.03, ge=0, le=0.5, description="Non-inferiority margin on edit persistence, "
                          "candidate − champion (absolute).")
    anchor_margin: float = Field(default=0.03, ge=0, le=0.5, description="Non-inferiority margin on edit "
                                 "persistence, candidate − anchor (v0): spent once over the lineage.")
    guardrails: dict[str, float] = Field(
        default_factory=lambda: {"broken_tool_call_rate": 0.02, "dissatisfied_followup_rate": 0.02},
        description="A/B metric -> the increase tolerated (absolute), candidate − champion.")
    confidence: float = Field(default=0.95, ge=0.5, lt=1, description="One-sided confidence of every test.")


@dataclass
class Bound:
    name: str
    against: str
    diff: float | None
    se: float | None
    bound: float | None          # the one-sided bound the rule reads (lower for the primary and anchor tests)
    limit: float                 # what it must clear
    passed: bool


@dataclass
class UsersVerdict:
    decision: str                # promote | keep_champion
    reasons: list[str]
    checks: list[Bound] = field(default_factory=list)

    @property
    def promote(self) -> bool:
        return self.decision == "promote"


def _check(name: str, against: str, d: dict | None, limit: float, z: float, worse_is_up: bool) -> Bound:
    diff, se = (d or {}).get("diff"), (d or {}).get("se")
    if diff is None or se is None:
        return Bound(name, against, diff, se, None, limit, False)
    bound = diff - z * se       # the one-sided lower bound, read by both kinds of check
    if worse_is_up:             # a guardrail: blocks when even the lower bound of the increase exceeds the limit
        return Bound(name, against, diff, se, bound, limit, bound <= limit)
    return Bound(name, against, diff, se, bound, -limit, bound > -limit)   # non-inferiority: above -limit


def pass_probability(se: float, margin: float, delta: float, confidence: float = 0.95) -> float:
    """The chance that a candidate whose true difference is `delta` passes a non-inferiority check at `margin`
    whose estimate has standard error `se`: P(estimate − z·se > −margin) = Φ((delta + margin) / se − z)."""
    nd = NormalDist()
    return nd.cdf((delta + margin) / se - nd.inv_cdf(confidence)) if se > 0 else float(delta > -margin)


def power_report(se: float | None, cfg: UsersGateConfig | None = None) -> dict | None:
    """The primary check's pass probability at the measured `se` for an equal candidate, one a margin worse and one
    twice the margin worse (None without a standard error)."""
    cfg = cfg or UsersGateConfig()
    if se is None:
        return None
    m = cfg.margin
    return {"se": se, "equal": pass_probability(se, m, 0.0, cfg.confidence),
            "worse_by_margin": pass_probability(se, m, -m, cfg.confidence),
            "worse_by_twice_the_margin": pass_probability(se, m, -2 * m, cfg.confidence)}


def decide_on_users(vs_champion: dict, vs_anchor: dict | None, cfg: UsersGateConfig | None = None) -> UsersVerdict:
    """`vs_champion` / `vs_anchor`: metric -> {"diff", "se"} of candidate − champion / candidate − anchor, paired
    by user. `vs_anchor` None: the candidate is compared with the champion only (no anchor in the lineage)."""
    cfg = cfg or UsersGateConfig()
    z = NormalDist().inv_cdf(cfg.confidence)
    checks = [_check(PRIMARY, "champion", vs_champion.get(PRIMARY), cfg.margin, z, False)]
    if vs_anchor is not None:
        checks.append(_check(PRIMARY, "anchor", vs_anchor.get(PRIMARY), cfg.anchor_margin, z, False))
    checks += [_check(m, "champion", vs_champion.get(m), limit, z, True) for m, limit in cfg.guardrails.items()]
    reasons = []
    for c in checks:
        if c.passed:
            continue
        if c.bound is None:
            reasons.append(f"{c.against}:no_data:{c.name}")
        elif c.name == PRIMARY:   # inferior: even the estimate is past the margin; else not shown either way
            verdict = "inferior" if c.diff <= c.limit else "inconclusive"
            reasons.append(verdict if c.against == "champion" else f"anchor:{verdict}")
        else:
            reasons.append(f"guardrail:{c.name}")
    return UsersVerdict("keep_champion" if reasons else "promote", reasons, checks)
