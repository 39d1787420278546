"""What a data-quality run says: one `SuiteResult` per suite, one `RuleResult` per expectation.

Plain dataclasses with JSON-ready values (no Great Expectations types), so reports, the orchestrator and MLflow
can read them without importing GX. `SuiteResult.from_dict(result.to_dict())` round-trips.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RuleResult:
    """The outcome of one expectation.

    `rule` is the name the report shows (unique in its suite); `expectation` the GX expectation type that judged
    it (or `rtrl_schema` for the schema check done before GX). `observed` is a short human-readable summary,
    `unexpected_examples` a few failing rows (the key column and the rule's input columns). `evaluated` is False
    when the rule could not run (a missing input column, an error inside GX): such a rule fails.
    """

    rule: str
    expectation: str
    column: str | None
    success: bool
    description: str = ""
    evaluated: bool = True
    element_count: int | None = None
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    observed_value: Any = None
    observed: str = ""
    unexpected_examples: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def status(self) -> str:
        if self.success:
            return "pass"
        return "fail" if self.evaluated else "error"


@dataclass
class SuiteResult:
    name: str
    success: bool
    results: list[RuleResult]
    row_count: int
    seconds: float

    @property
    def failed(self) -> list[RuleResult]:
        return [r for r in self.results if not r.success]

    @property
    def failed_rules(self) -> list[str]:
        return [r.rule for r in self.failed]

    def rule(self, name: str) -> RuleResult:
        for r in self.results:
            if r.rule == name:
                return r
        raise KeyError(f"suite {self.name!r} has no rule {name!r}; rules: {[r.rule for r in self.results]}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SuiteResult":
        return cls(name=d["name"], success=d["success"], row_count=d["row_count"], seconds=d["seconds"],
                   results=[RuleResult(**r) for r in d["results"]])


def all_passed(results: list[SuiteResult]) -> bool:
    return all(s.success for s in results)
