"""`[gate]`: how a candidate checkpoint is compared with the champion before it may be promoted (docs/gate.md).

The gate is a list of suites (`gate.suites`), each with its own metric, margins and size, each configured in its
own section: `[gate.tasks]` the sandboxed held-out tasks (resolved rate, `evals/gate/decision.py` reads nothing
else), `[gate.users]` held-out simulated users (edit persistence, `evals/gate/users.py`). A candidate is promoted
only when every suite shows it non-inferior to the champion it was trained from and to the lineage's anchor
(`gate.anchor_alias`). In `[gate.tasks]` differences are candidate − champion in absolute rate points (0.05 = five
percentage points) except the token guardrail, which is relative (0.10 = ten per cent more median completion
tokens).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evals.gate.users import UsersGateConfig

GUARDRAILS = ("broken_tool_calls", "edit_rate", "needless_questions", "median_completion_tokens")


class GuardrailMargins(BaseModel):
    """How much worse a guardrail metric may be shown to be before it blocks promotion. A guardrail trips only
    when the data show, at `gate.tasks.confidence`, that the candidate is worse by more than its margin."""

    model_config = ConfigDict(extra="forbid")

    broken_tool_calls: float = Field(
        default=0.02, ge=0, le=1,
        description="Episodes with at least one broken tool call: rate increase tolerated (absolute).")
    edit_rate: float = Field(
        default=0.05, ge=0, le=1,
        description="Episodes that applied an edit: rate decrease tolerated (absolute; a model that stops "
                    "editing can look safe on every other metric).")
    needless_questions: float = Field(
        default=0.05, ge=0, le=1,
        description="Episodes where the model asked a question on a clear (not `ambiguous`) task: rate increase "
                    "tolerated (absolute). Questions on ambiguous tasks are right and not counted.")
    median_completion_tokens: float = Field(
        default=0.10, ge=0, le=10,
        description="Median completion tokens per episode: relative increase tolerated (0.10 = +10%).")


SUITES = ("tasks", "users")


class TasksGateConfig(BaseModel):
    """`[gate.tasks]`: the suite of sandboxed held-out tasks (CursorBench-style): the candidate and the champion (and
    the anchor) run the same tasks with the same seeds; its metric is the resolved rate, paired by task."""

    model_config = ConfigDict(extra="forbid")

    # primary test: one-sided paired non-inferiority on resolved rate
    margin: float = Field(default=0.05, ge=0, le=0.5,
                          description="Non-inferiority margin on resolved rate (absolute): the candidate passes when "
                                      "its rate is shown to be above champion − margin.")
    confidence: float = Field(default=0.95, ge=0.5, lt=1,
                              description="One-sided confidence of the non-inferiority test and of every guardrail; "
                                          "the reported two-sided interval has level 2·confidence − 1 (its ends are "
                                          "the two one-sided bounds).")
    anchor_margin: float = Field(default=0.05, ge=0, le=0.5,
                                 description="Non-inferiority margin on resolved rate against the lineage's fixed "
                                             "anchor (e.g. v0), when the gate has an anchor arm: the candidate must "
                                             "also be shown above anchor − anchor_margin. Spent once over the "
                                             "lineage, not per cycle: losses that each pass against the parent "
                                             "cannot add up past it.")
    guardrails: GuardrailMargins = Field(default_factory=GuardrailMargins)
    # fail-closed conditions
    max_infra_failure_rate: float = Field(
        default=0.10, ge=0, le=1,
        description="Most pairs (task, sample) that may be lost because either arm's episode was an infrastructure "
                    "failure or is missing; above it the champion stays.")
    min_pairs: int = Field(default=40, ge=2, description="Fewer valid pairs keep the champion (too_few_pairs).")
    min_tasks: int = Field(default=10, ge=2,
                           description="Fewer tasks with a valid pair keep the champion: the interval's degrees of "
                                       "freedom are tasks − 1.")
    # suite and sampling
    suite_dir: str = Field(default="", description="Task folders to evaluate on (evals/tasks/spec.py format); '' = "
                           "the generated held-out suite under the state dir (suite_tasks tasks, suite_seed).")
    suite_tasks: int = Field(default=60, ge=2, le=100_000, description="Tasks of the generated default suite.")
    suite_seed: int = Field(default=7, ge=0, description="Seed of the generated default suite (its workspaces are "
                            "drawn from a seed space training traffic never uses).")
    suites_root: str = Field(default="", description="Where generated suites (the default held-out suite, the "
                             "simulator orgs' own suites) are made; '' = <state_dir>/eval-suites.")
    org_suite_tasks: int = Field(default=32, ge=2, le=100_000, description="Tasks of an org's own generated suite "
                                 "(its workspaces, id and conventions), the second suite an org's specialized "
                                 "candidate must pass (evals/org_gate.py).")
    org_max_tasks: int = Field(default=0, ge=0, description="Tasks of the held-out suite an org's specialized "
                               "candidate runs (its first ones; their champion episodes are read from a whole-suite "
                               "gate's when kept); 0 = all.")
    org_samples_per_task: int = Field(default=0, ge=0, le=64, description="Samples per task of an org's "
                                      "candidate on both its suites; 0 = samples_per_task.")
    org_suites_dir: str = Field(default="", description="Folder of the orgs' own suites, one task-folder suite per "
                                "org in `<dir>/<org>/`; '' = generated for the simulator's orgs (o0, o1, ...), none "
                                "for others.")
    flaky_runs: int = Field(default=3, ge=2, le=20, description="Gradings of each task's snapshot and reference "
                            "solution by the flaky-task check; a task whose outcome changes is quarantined.")
    flaky_cache: bool = Field(default=True, description="Keep each task's flaky-check verdict in the suite folder "
                              "(.flaky-cache.json), keyed by the task's files, flaky_runs and the grading code: "
                              "an unchanged task is not graded again at the next gate.")
    engine_cpu_cores: str = Field(default="", pattern=r"^$|^(auto|nobind|[0-9,\-|]+)$",
                                  description="CPU-only, opt-in: cores the gate's private vLLM engines bind to "
                                              "(serving.cpu_cores for them); \"\" = serving.cpu_cores. On a machine "
                                              "that also serves live traffic, give them cores serving does not use. "
                                              "Leave \"\" on GPUs.")
    via_serving: bool = Field(default=False, description="Evaluate on the running `rtrl serve` (serving.host:port) "
                              "instead of private engines: both versions are staged there (POST /admin/stage), the "
                              "arms run at once, and a promoted candidate is switched to without a second load. "
                              "Pinned eval requests are never logged as trajectories.")
    reuse_episodes: bool = Field(default=False, description="Keep each gate's episodes per checkpoint (by its "
                                 "content digest, in <suite>/.episode-cache) and, when the champion's are kept under "
                                 "the same suite, tasks, samples, seed and sampling settings, use them instead of "
                                 "running the champion again (evals/episode_cache.py): only the candidate's arm runs.")
    workers: int = Field(default=8, ge=1, le=256, description="Episodes run concurrently per arm (the serving "
                         "engine batches their requests; grading runs in parallel sandboxes).")
    samples_per_task: int = Field(default=4, ge=1, le=100,
                                  description="K: samples per task and arm, the same seeds for both arms.")
    target_power: float = Field(default=0.8, gt=0, lt=1,
                                description="Power the report's suite-size advice aims for (an equal candidate "
                                            "accepted with this probability).")
    bootstrap_resamples: int = Field(default=2000, ge=100, le=100_000,
                                     description="Task-level bootstrap resamples of the median-token guardrail.")
    seed: int = Field(default=0, ge=0, description="Seed of the bootstrap (the decision is reproducible).")
    # report
    report_regressions: int = Field(default=10, ge=0, le=1000,
                                    description="Worst regressions (tasks the champion resolved and the candidate "
                                                "did not) shown with transcripts in the report.")

    @property
    def org_samples(self) -> int:
        """Samples per task of an org's specialized candidate: org_samples_per_task, else samples_per_task."""
        return self.org_samples_per_task or self.samples_per_task


class GateConfig(BaseModel):
    """`[gate]`: the suites a candidate must pass and what they share."""

    model_config = ConfigDict(extra="forbid")

    suites: list[Literal["tasks", "users"]] = Field(
        default_factory=lambda: list(SUITES), min_length=1,
        description="The suites a candidate must pass, in the order they run (an earlier suite that keeps the "
                    "champion ends the gate): \"tasks\" the sandboxed held-out tasks ([gate.tasks]), \"users\" "
                    "held-out simulated users ([gate.users]). Each must show the candidate non-inferior to the "
                    "champion it was trained from and to the anchor.")
    anchor_alias: str = Field(default="control", description="Registry alias of the lineage's fixed anchor (v0: "
                              "alias control in the embedded default): every suite also compares the candidate with "
                              "it, at the suite's anchor_margin (the tasks suite runs it as a third arm, its "
                              "episodes reused when kept, e.g. by `rtrl demo --prepare`). '' or an alias that is not "
                              "set: no anchor.")
    experiment: str = Field(default="rtrl-gate", min_length=1, description="MLflow experiment of the gate runs; "
                            "the decision is also tagged on the candidate version.")
    keep_reports: int = Field(default=20, ge=0, le=100_000, description="Retention of the gate's reports "
                              "(<state_dir>/gate/v*-vs-v*-*, after each cycle): the newest N keep every file; an "
                              "older one keeps its report.json (decision, interval, counts: the dashboard's row) and "
                              "loses episodes.jsonl, report.md and report.html (MLflow's gate run keeps them). The "
                              "report of a version an alias points to keeps every file. 0 keeps every file.")
    keep_cached_versions: int = Field(default=20, ge=0, le=100_000, description="Retention of the per-checkpoint "
                                      "measurements gates reuse (after each cycle): each suite folder's kept "
                                      "episodes (<suite>/.episode-cache) and the users suite's unit sums "
                                      "(<state_dir>/gate/users/units) keep the N checkpoints used most recently; "
                                      "every gate reads its champion's and anchor's, so those stay. An evicted "
                                      "checkpoint is measured again when a gate needs it. 0 keeps all.")
    tasks: TasksGateConfig = Field(default_factory=TasksGateConfig, description="The suite of sandboxed held-out "
                                   "tasks (evals/gate/decision.py).")
    users: UsersGateConfig = Field(default_factory=UsersGateConfig, description="The suite of held-out simulated "
                                   "users (evals/gate/users.py).")

    @field_validator("suites")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"a suite is listed twice: {v}")
        return v
