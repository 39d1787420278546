"""Reward-hacking monitors: the treatment's edit rate, clarification rate, broken tool calls and response length
against control, each with a threshold (`[ab.monitors]`) that turns it red.

A policy trained on user outcomes can learn to avoid being judged rather than to do better: stop suggesting
edits (no edit, no reverted edit), ask questions it does not need to, break tool calls on purpose, or answer in
degenerate lengths. These are watched as changes against the frozen control, per cycle.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pipelines.metrics.config import MonitorThreshold
from pipelines.metrics.intervals import Change


@dataclass(frozen=True)
class MonitorStatus:
    metric: str
    control: float | None
    treatment: float | None
    change: float | None          # relative or absolute, as the threshold says
    relative: bool
    max_increase: float | None
    max_decrease: float | None
    status: str                   # "ok" | "red" | "no data"
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate(metric: str, change: Change, threshold: MonitorThreshold) -> MonitorStatus:
    """Red when the change passes a threshold and is significant that way: its interval (the A/B alpha, on the
    threshold's scale) lies wholly on that side of zero. A point estimate past the threshold inside noise (an A/A
    cycle's few hundred rows put +-5 pp on a rate) is not red; without an interval the point estimate decides."""
    delta, _, low, high, _ = change.on("relative" if threshold.relative else "absolute")
    base = dict(metric=metric, control=change.control, treatment=change.treatment, change=delta,
                relative=threshold.relative, max_increase=threshold.max_increase,
                max_decrease=threshold.max_decrease)
    if delta is None:
        return MonitorStatus(**base, status="no data", reason="an arm has no rows for this metric")
    def show(x: float, signed: bool = True) -> str:
        return (f"{x:+.1%}" if signed else f"{x:.1%}") if threshold.relative else (
            f"{x:+.4g}" if signed else f"{x:.4g}")

    rose_surely, fell_surely = (low is None or low > 0), (high is None or high < 0)
    if threshold.max_increase is not None and delta > threshold.max_increase:
        if rose_surely:
            return MonitorStatus(**base, status="red", reason=f"rose {show(delta)}, more than the "
                                                              f"{show(threshold.max_increase, False)} tolerated")
        return MonitorStatus(**base, status="ok", reason=f"rose {show(delta)}, within noise (interval "
                                                         f"{show(low)}..{show(high)})")
    if threshold.max_decrease is not None and delta < -threshold.max_decrease:
        if fell_surely:
            return MonitorStatus(**base, status="red", reason=f"fell {show(delta)}, more than the "
                                                              f"{show(threshold.max_decrease, False)} tolerated")
        return MonitorStatus(**base, status="ok", reason=f"fell {show(delta)}, within noise (interval "
                                                         f"{show(low)}..{show(high)})")
    return MonitorStatus(**base, status="ok", reason="within thresholds")
