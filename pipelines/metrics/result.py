"""What one cycle's A/B computation yields: `CycleMetrics` (JSON-ready) plus its unit stats and latency histogram
and the totals over every cycle so far (the frames the store keeps beside it; the next cycle adds its own to the
totals to compute its cumulative results)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import polars as pl


@dataclass
class MetricResult:
    """One row of the experiment table: treatment vs control for one metric."""

    metric: str
    label: str
    unit: str                          # rate | ms | tokens | reward
    better: str                        # higher | lower | none
    scale: str = "relative"            # what `change`, low, high, cum_change, seq_*, cuped_* measure: relative
                                       # (treatment / control - 1) or absolute (treatment - control)
    # this cycle (fixed-horizon: each cycle's treatment checkpoint is compared once)
    control: float | None = None
    treatment: float | None = None
    absolute: float | None = None      # treatment - control
    relative: float | None = None      # treatment / control - 1
    change: float | None = None        # the change on `scale` (= relative or absolute)
    low: float | None = None           # interval on the change, level 1 - alpha
    high: float | None = None
    p_value: float | None = None
    abs_low: float | None = None       # interval on the absolute change (treatment - control), level 1 - alpha
    abs_high: float | None = None
    denominator_control: float | None = None   # rows counted (known labels for edit persistence)
    denominator_treatment: float | None = None
    verdict: str = "inconclusive"      # better | worse | changed | inconclusive (from low/high and `better`)
    # every cycle so far (always-valid: may be looked at after every cycle)
    cum_control: float | None = None
    cum_treatment: float | None = None
    cum_change: float | None = None
    seq_low: float | None = None
    seq_high: float | None = None
    seq_p_value: float | None = None   # running minimum over cycles of the mSPRT p-value
    seq_verdict: str = "inconclusive"
    # CUPED (only with a pre-experiment period)
    cuped_change: float | None = None
    cuped_low: float | None = None
    cuped_high: float | None = None
    cuped_variance_reduction: float | None = None


def verdict(low: float | None, high: float | None, better: str) -> str:
    if low is None or high is None or (low <= 0 <= high):
        return "inconclusive"
    up = low > 0
    if better == "none":
        return "changed"
    return "better" if up == (better == "higher") else "worse"


FRAMES = ("units", "latency", "totals")   # what the store keeps beside the JSON


@dataclass
class CycleMetrics:
    cycle_id: str
    control_arm: str
    treatment_arm: str
    alpha: float
    as_of: str | None = None
    seq: int | None = None                                  # order among stored cycles (set by the store)
    versions: dict[str, list[str]] = field(default_factory=dict)       # arm -> policy versions served
    counts: dict[str, Any] = field(default_factory=dict)
    metrics: list[MetricResult] = field(default_factory=list)
    srm: dict[str, Any] = field(default_factory=dict)                  # this cycle's users
    srm_cumulative: dict[str, Any] = field(default_factory=dict)       # distinct users over every cycle so far
    by_version: list[dict[str, Any]] = field(default_factory=list)
    by_org: list[dict[str, Any]] = field(default_factory=list)
    monitors: list[dict[str, Any]] = field(default_factory=list)
    cumulative_cycles: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    # frames kept by the store next to the JSON (not part of to_dict)
    units: pl.DataFrame | None = field(default=None, repr=False, compare=False)
    latency: pl.DataFrame | None = field(default=None, repr=False, compare=False)
    totals: Any = field(default=None, repr=False, compare=False)   # cumulative.Totals after this cycle

    def metric(self, name: str) -> MetricResult:
        for m in self.metrics:
            if m.metric == name:
                return m
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in FRAMES}
        d["metrics"] = [asdict(m) for m in self.metrics]
        return _finite(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CycleMetrics":
        known = {f.name for f in fields(cls)} - {*FRAMES, "metrics"}
        mfields = {f.name for f in fields(MetricResult)}
        return cls(**{k: v for k, v in d.items() if k in known},
                   metrics=[MetricResult(**{k: v for k, v in m.items() if k in mfields}) for m in d["metrics"]])


def _finite(x: Any) -> Any:
    """NaN/inf -> None: strict JSON."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
