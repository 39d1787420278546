"""The learning curve over seeds: per cycle, each seed's champion against v0; the slope of edit persistence against
cycle; the last champion against the first promoted one, pooled over seeds.

Pure functions of the lineages `infra.learning.loop.run_lineage` returns (no model, no process), so the arithmetic
is unit-tested on hand-made numbers.

- **A cycle's point** is the champion after that cycle against v0 on the seed's fixed scoring users. A cycle that
  kept its champion repeats the previous point (the same checkpoint on the same users).
- **Slope**: per seed, the least-squares slope of the persistence difference against cycle; over seeds, their mean
  with a t interval on K − 1 degrees of freedom (each seed one independent replicate of the whole loop).
- **Last against first**: the cycle-N champion minus the first promoted champion on edit persistence, per seed
  paired by user on the seed's scoring users, pooled as the mean over seeds with the standard error
  sqrt(sum se_k^2) / K (independent seeds).
"""

from __future__ import annotations

import math
from statistics import NormalDist

from scipy import stats as sps

from evals.gate.users import PRIMARY     # edit persistence: the gate's primary metric is the curve's


def points(lineage: dict, metric: str = PRIMARY) -> list[dict | None]:
    """Per cycle, the champion's difference against v0 on `metric` ({diff, ci_low, ci_high, se}); None before the
    first promotion (the champion is v0: difference 0 by definition)."""
    out, last = [], None
    for c in lineage["cycles"]:
        if c.get("score"):
            last = c["score"][metric]
        out.append(last)
    return out


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys on xs (None with fewer than two points)."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else None


def seed_slope(lineage: dict, metric: str = PRIMARY) -> float | None:
    """One seed's slope of the champion's difference against v0, per cycle (v0 itself is cycle 0 at 0)."""
    pts = points(lineage, metric)
    xs = [0.0] + [float(i + 1) for i in range(len(pts))]
    ys = [0.0] + [p["diff"] if p and p.get("diff") is not None else 0.0 for p in pts]
    return slope(xs, ys)


def mean_interval(values: list[float], alpha: float = 0.05) -> dict:
    """Mean of independent replicates with a t interval (K − 1 degrees of freedom)."""
    k = len(values)
    if k == 0:
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    m = sum(values) / k
    if k < 2:
        return {"mean": m, "ci_low": None, "ci_high": None, "n": k}
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (k - 1))
    half = float(sps.t.ppf(1 - alpha / 2, k - 1)) * sd / math.sqrt(k)
    return {"mean": m, "ci_low": m - half, "ci_high": half + m, "n": k}


def last_vs_first(lineages: list[dict], alpha: float = 0.05, metric: str = PRIMARY) -> dict:
    """The last cycle's champion minus the first promoted champion on `metric` (each lineage's `last_vs_first`,
    paired by user on its scoring users), per seed and pooled: the mean over seeds with the standard error
    sqrt(sum se_k^2) / K (independent seeds). A seed that never promoted, or promoted once, has no difference."""
    z = NormalDist().inv_cdf(1 - alpha / 2)
    per_seed = [{"seed": lin["seed"], **((lin.get("last_vs_first") or {}).get(metric) or {"diff": None})}
                for lin in lineages]
    known = [s for s in per_seed if s.get("diff") is not None and s.get("se") is not None]
    if not known:
        return {"per_seed": per_seed, "pooled": None}
    k = len(known)
    diff = sum(s["diff"] for s in known) / k
    se = math.sqrt(sum(s["se"] ** 2 for s in known)) / k
    return {"per_seed": per_seed, "pooled": {"diff": diff, "se": se, "ci_low": diff - z * se,
                                             "ci_high": diff + z * se, "seeds": k}}


def summarize(lineages: list[dict], cycles: int, alpha: float = 0.05) -> dict:
    """The bench's aggregate: per cycle, every seed's champion against v0 (each metric's difference and interval)
    and the gate's decisions; the slope of persistence over seeds; the last champion against the first."""
    per_cycle = []
    for i in range(cycles):
        row = {"cycle": i + 1, "seeds": []}
        for lin in lineages:
            c = lin["cycles"][i] if i < len(lin["cycles"]) else None
            if c is None:
                continue
            row["seeds"].append({"seed": lin["seed"], "champion": c["champion"], "decision": c["decision"],
                                 "vs_v0": _current(lin, i), "suite": c.get("suite")})
        per_cycle.append(row)
    slopes = [s for s in (seed_slope(lin) for lin in lineages) if s is not None]
    return {"per_cycle": per_cycle,
            "slope_persistence_per_cycle": {**mean_interval(slopes, alpha), "per_seed": slopes},
            "last_vs_first_promoted": last_vs_first(lineages, alpha)}


def _current(lineage: dict, index: int) -> dict | None:
    """The champion's differences against v0 after cycle index + 1 (None: still v0)."""
    for c in reversed(lineage["cycles"][:index + 1]):
        if c.get("score"):
            return c["score"]
    return None
