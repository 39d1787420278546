"""Which A/B metrics exist: name, label, unit, which direction is better, and how each is estimated.

No polars here (the config imports it). The formulas are in `rates.py` (ratio metrics: a sum over rows divided by
a sum over rows, users as the unit of analysis) and `quantiles.py` (latency quantiles).

| metric | per row: numerator / denominator | better |
|---|---|---|
| edit_persistence_rate | persistence / 1, edit attempts with a known outcome: rows whose persistence_label is "known" (rejected edits persist 0) and rows with a broken tool call (persist 0); "unknown" (immature) labels are excluded and their share reported | higher |
| dissatisfied_followup_rate | follow-up classified dissatisfied, or saying the question was unnecessary / 1 | lower |
| broken_tool_call_rate | response has >= 1 broken tool call / 1 (as the gate's guardrail) | lower |
| shown_edit_persistence_rate | persistence / 1, rows whose persistence_label is "known" only (version 1's edit persistence: it leaves broken calls out, so it rewards breaking them) | monitor |
| edit_rate | response_kind == "edit" / 1 | monitor |
| clarification_rate | response_kind == "question" / 1 | monitor |
| tokens_per_response | completion_tokens / 1 | monitor |
| reward_mean | reward / 1 (the scalar the trainer optimizes; its change is absolute, not relative) | higher |
| latency_p50, latency_p95 | quantiles of latency_ms | lower |
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricInfo:
    name: str
    label: str            # what a table shows
    unit: str             # "rate" (a share, shown in %) | "tokens" | "ms" | "reward"
    better: str           # "higher" | "lower" | "none" (a monitor: a change either way is only watched)
    kind: str             # "ratio" | "quantile"
    quantile: float | None = None
    scale: str = "relative"   # the change reported: treatment / control - 1, or treatment - control ("absolute",
                              # for a metric whose sign can flip, like the reward)


METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("edit_persistence_rate", "Edit persistence", "rate", "higher", "ratio"),
    MetricInfo("dissatisfied_followup_rate", "Dissatisfied follow-ups", "rate", "lower", "ratio"),
    MetricInfo("latency_p50", "Latency p50", "ms", "lower", "quantile", 0.5),
    MetricInfo("latency_p95", "Latency p95", "ms", "lower", "quantile", 0.95),
    MetricInfo("broken_tool_call_rate", "Broken tool calls", "rate", "lower", "ratio"),
    MetricInfo("shown_edit_persistence_rate", "Persistence of shown edits", "rate", "none", "ratio"),
    MetricInfo("edit_rate", "Edit rate", "rate", "none", "ratio"),
    MetricInfo("clarification_rate", "Clarification rate", "rate", "none", "ratio"),
    MetricInfo("tokens_per_response", "Tokens per response", "tokens", "none", "ratio"),
    MetricInfo("reward_mean", "Mean reward", "reward", "higher", "ratio", scale="absolute"),
)
METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
BY_NAME: dict[str, MetricInfo] = {m.name: m for m in METRICS}
RATIO_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.kind == "ratio")
QUANTILE_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS if m.kind == "quantile")
