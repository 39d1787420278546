"""The cycle steps' results, typed: what each step function returns, what the ledger keeps (as JSON), what the next
steps read back. One model per step, in one place; `infra.orchestrator.steps` makes them, every executor (the
in-process one, the Dagster job) records them the same way.

    res = TrainResult(candidate="4", parent="3", ...)
    rec.steps["train"] = {"status": "done", "result": res.model_dump(mode="json"), ...}   # the ledger
    TrainResult.model_validate(rec.result("train"))                                      # a later step

A resumed cycle reads results that an older build wrote: unknown keys are ignored, missing ones take the defaults.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class StepResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def record(self) -> dict:
        """The result as the ledger stores it (JSON types)."""
        return self.model_dump(mode="json")


class CollectResult(StepResult):
    champion: str = Field(description="The version alias champion pointed to: the policy that served the range.")
    records: int = Field(0, description="Kafka records in the cycle's fixed offset range.")
    reward_cycle_seq: int = Field(0, description="The reward job's sequence number of this cycle.")
    after: str | None = Field(None, description="Rows maturing by then were emitted by earlier cycles (ISO).")
    as_of: str | None = Field(None, description="Rows maturing by then are emitted by this cycle (ISO).")


class DistillResult(StepResult):
    rows: int = Field(0, description="Reward rows the cycle emitted (window = the cycle id).")
    records_in_range: int = 0
    as_of: str | None = None
    after: str | None = None
    out: str = Field("", description="The reward table the rows went to.")
    dead_letters: dict[str, int] = Field(default_factory=dict, description="Dead letters by reason.")
    duplicates_dropped: int = 0
    unknown_labels: int = 0
    late_events: int = 0
    requests_pending: int = 0
    counters: dict[str, int] = Field(default_factory=dict, description="Every counter of the reward job's run, as "
                                     "`rtrl rewards` summarizes them (outcome rows included).")
    seconds: float = 0.0


class ValidateResult(StepResult):
    passed: bool = True
    report: str = Field("", description="The data-quality report (HTML).")
    suites: int = 0


class MeasureResult(StepResult):
    measured: bool = False
    reason: str = ""
    rows: int | None = None
    versions: dict[str, list[str]] = Field(default_factory=dict, description="Arm -> the versions that served it.")
    srm_flagged: bool = False
    edit_persistence_rate: dict[str, float | None] | None = None
    dissatisfied_followup_rate: dict[str, float | None] | None = None
    monitors: list[dict[str, Any]] = Field(default_factory=list, description="The reward-hacking monitors "
                                           "(pipelines.metrics.monitors): metric, control, treatment, change, "
                                           "status (ok | red | no data), reason.")
    aa: bool = Field(False, description="Both arms served the same versions this cycle: an A/A comparison.")
    aa_failed: bool = Field(False, description="An A/A cycle whose headline difference (edit persistence or "
                            "dissatisfied follow-ups) excluded zero: the split itself favours an arm.")


class TrainStepResult(StepResult):
    candidate: str | None = Field(None, description="The registered candidate version.")
    parent: str | None = Field(None, description="The champion it was trained from.")
    counts: dict[str, Any] = Field(default_factory=dict, description="Rows selected, kept and dropped by reason.")
    steps: int = 0
    tokens: int = 0
    reward_mean: float | None = None
    seconds: float = 0.0
    loop_seconds: float = 0.0
    already_done: bool = False
    shipped: dict[str, Any] | None = Field(None, description="How the candidate's served weights were stored: kind "
                                           "(anchor | delta), bytes, full_bytes, share, precision, parent "
                                           "(registry.shipping.shipped_of); None: none shipped.")


class GateResult(StepResult):
    decision: str = Field(description="promote | keep_champion")
    reasons: list[str] = Field(default_factory=list)
    candidate_version: str | None = None
    champion_version: str | None = None
    resolved_candidate: float | None = None
    resolved_champion: float | None = None
    difference: float | None = None
    interval: str | None = None
    tasks: int | None = None
    samples_per_task: int | None = None
    quarantined: int | None = None
    episodes: int | None = None
    infra_failures: int | None = None
    arms_run: list[str] = Field(default_factory=list)
    report: str = ""
    mlflow_run_id: str | None = None
    seconds: dict[str, float] = Field(default_factory=dict)
    anchor_version: str | None = None
    suites: list[dict[str, Any]] = Field(default_factory=list, description="Each suite of gate.suites in the order "
                                         "it ran: its metric, decision, reasons, intervals against the champion and "
                                         "the anchor, and power (infra.gate_suites.SuiteOutcome).")
    reused: bool = Field(False, description="Read back from the candidate's gate.* tags (a resumed cycle).")
    org_suite: dict[str, Any] | None = Field(None, description="An org's version: its own suite's run.")


class PromoteResult(StepResult):
    promoted: bool
    champion: str | None = None
    previous: str | None = None
    already: bool = False
    reason: str = ""


class OrgResult(StepResult):
    trained: bool
    reason: str = ""
    candidate: str | None = None          # <version>@<org>
    parent: str | None = None
    rows: dict[str, Any] = Field(default_factory=dict)
    gate: str | None = None
    interval: str | None = None
    gate_reasons: list[str] = Field(default_factory=list, description="Why its gate kept the champion, if it did.")
    gate_suites: list[dict[str, Any]] = Field(default_factory=list, description="Its gate's suites: each one's "
                                              "decision, reasons, intervals against the champion and the anchor, "
                                              "power (as GateResult.suites).")
    promoted: bool = False
    champion: str | None = None
    already: bool = False


class SpecializeResult(StepResult):
    enabled: bool
    orgs: dict[str, OrgResult] = Field(default_factory=dict)


class DeployResult(StepResult):
    deployed: bool
    champion: str | None = None
    arms: dict[str, str] = Field(default_factory=dict)
    waited_s: float | None = None
    swap_load_s: float | None = None
    reason: str = ""
    retention: dict[str, Any] | None = Field(None, description="What registry retention did after the deploy "
                                             "(infra.retention.run.brief: artifacts deleted, cache evicted), "
                                             "{'error': ...} when it failed; None when retention.enabled is off.")


RESULTS: dict[str, type[StepResult]] = {
    "collect": CollectResult, "distill": DistillResult, "validate": ValidateResult, "measure": MeasureResult,
    "train": TrainStepResult, "evaluate": GateResult, "promote": PromoteResult, "specialize": SpecializeResult,
    "deploy": DeployResult}
