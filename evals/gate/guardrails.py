"""Guardrails: metrics the candidate must not be significantly worse on, whatever its resolved rate.

Each is a one-sided test with its own margin (config.GuardrailMargins): it trips when the data show, at
`gate.tasks.confidence`, that the candidate is worse by more than the margin (the bound of the difference on the worse
side lies beyond the margin). An inconclusive guardrail does not block: the fail-closed test is the primary one.

- broken_tool_calls: share of episodes with at least one broken tool call (higher is worse)
- edit_rate: share of episodes that applied an edit (lower is worse: a model that stops acting looks safe)
- needless_questions: share of episodes that asked a question on a clear task (higher is worse); a question on
  an ambiguous task is the right move, so counting every question would block a candidate for asking where it
  should
- median_completion_tokens: median completion tokens per episode, relative (higher is worse; bootstrap.py)

Rates use the clustered paired interval of stats.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from evals.gate.bootstrap import median_ratio
from evals.gate.config import TasksGateConfig
from evals.gate.pairs import Pairs
from evals.gate.stats import paired_difference

# name -> (Episode attribute, the direction that is worse)
BINARY = {"broken_tool_calls": ("broken", "higher"), "edit_rate": ("edited", "lower"),
          "needless_questions": ("needless_question", "higher")}


@dataclass
class GuardrailResult:
    name: str
    worse_when: str        # "higher" | "lower"
    unit: str              # "rate" (absolute difference) | "relative" (candidate / champion − 1)
    candidate: float
    champion: float
    difference: float      # candidate − champion (rates) or relative change (tokens)
    lower: float           # one-sided bounds of the difference at the gate's confidence
    upper: float
    margin: float
    p_worse: float         # p-value of H0 "not worse by more than the margin"
    passed: bool
    method: str


def _binary(name: str, pairs: Pairs, cfg: TasksGateConfig) -> GuardrailResult:
    attr, worse = BINARY[name]
    margin = getattr(cfg.guardrails, name)
    d = paired_difference(pairs.column("candidate", attr), pairs.column("champion", attr), pairs.cluster,
                          cfg.confidence)
    if worse == "higher":
        tripped, p = d.lower > margin, d.p_above(margin)
    else:  # the harm is champion − candidate: its lower bound is −upper
        tripped = -d.upper > margin
        p = d.p_below(-margin)
    return GuardrailResult(name, worse, "rate", d.rate_a, d.rate_b, d.estimate, d.lower, d.upper, margin, float(p),
                           not tripped, f"clustered paired difference, t on {d.df} df")


def _tokens(pairs: Pairs, cfg: TasksGateConfig) -> GuardrailResult:
    margin = cfg.guardrails.median_completion_tokens
    m = median_ratio(pairs.column("candidate", "completion_tokens"), pairs.column("champion", "completion_tokens"),
                     pairs.cluster, cfg.confidence, cfg.bootstrap_resamples, cfg.seed, threshold=margin)
    return GuardrailResult("median_completion_tokens", "higher", "relative", m.candidate_median, m.champion_median,
                           m.estimate, m.lower, m.upper, margin, m.p_above, not m.lower > margin,
                           f"task bootstrap, {m.resamples} resamples, percentile bounds")


def evaluate_guardrails(pairs: Pairs, cfg: TasksGateConfig) -> list[GuardrailResult]:
    """Every guardrail on the valid pairs (needs pairs from at least two tasks)."""
    return [*(_binary(name, pairs, cfg) for name in BINARY), _tokens(pairs, cfg)]
