"""`[simulator]`: the simulated user population (workspaces, tasks, behaviour) and its clock.

Times are simulated seconds (event time); probabilities are per decision. `rtrl simulate` and the demo read it;
tests build it directly. See `instrumentation/simulator/user.py` for what each behaviour parameter drives.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class SimulatorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, ge=0, description="Seeds the population: orgs, workspaces, users and their "
                      "behaviour.")
    orgs: int = Field(default=4, ge=1, le=1000, description="Organizations (each with its own conventions).")
    users: int = Field(default=8, ge=1, le=10_000, description="Simulated users (`rtrl simulate --users`).")
    files_per_workspace: int = Field(default=5, ge=1, le=15, description="Python files in each user's workspace.")
    keyword_only_orgs: list[str] = Field(default=[], description="Orgs (`o<i>`) whose house rule makes a new "
                                         "parameter keyword-only (`def f(items, *, timeout=3)`); with any listed, "
                                         "every other org's rule is the positional form. Nothing in a file says "
                                         "which rule holds until one is applied, so it is what an org's adapter "
                                         "learns (docs/simulator.md). [] = no org has a rule.")

    # -- the clock (docs/simulator.md) --
    speed: float = Field(default=600.0, gt=0, le=1_000_000, description="Simulated seconds per wall second "
                         "(600: a five-hour cycle takes 30 s). A policy call's latency counts 1:1.")
    start_time: str = Field(default="", description="Simulated instant the run starts at (ISO 8601 with zone). "
                            "'' = so that the run ends at the present (event times never run ahead of receipt); "
                            "the deterministic mode uses 2026-11-01T00:00:00Z.")
    deterministic_latency_s: float = Field(default=2.0, ge=0, le=600, description="Simulated latency of a "
                                           "policy call in the deterministic mode (which reads no wall clock).")

    # -- sessions and requests --
    ambiguous_rate: float = Field(default=0.25, ge=0.0, le=1.0,
                                  description="Share of requests made ambiguous where the file allows it.")
    tasks_per_session: float = Field(default=6.0, ge=1, le=1000, description="Mean tasks per session (geometric).")
    think_s: tuple[float, float] = Field(default=(30.0, 240.0), description="Pause before the next task of a "
                                         "session, uniform in [min, max].")
    session_gap_s: tuple[float, float] = Field(default=(600.0, 3600.0), description="Pause between sessions "
                                               "(also the spread of the users' first sessions).")
    start_spread_s: float = Field(default=0.0, ge=0, le=7 * 86_400, description="Users' first sessions start "
                                  "spread over this many simulated seconds; 0 = one session gap (session_gap_s max), "
                                  "as in the steady state.")
    privacy_rate: float = Field(default=0.05, ge=0.0, le=1.0, description="Share of users in privacy mode.")

    # -- reactions --
    apply_delay_s: tuple[float, float] = Field(default=(5.0, 60.0), description="Reading a suggested edit "
                                               "before applying or rejecting it.")
    p_apply_correct: float = Field(default=0.9, ge=0.0, le=1.0, description="Apply a correct edit (else reject).")
    p_apply_wrong: float = Field(default=0.25, ge=0.0, le=1.0, description="Apply a wrong edit (noise).")
    p_keep_correct: float = Field(default=0.95, ge=0.0, le=1.0,
                                  description="Keep an applied correct edit (else revert it: noise).")
    p_revert_wrong: float = Field(default=0.85, ge=0.0, le=1.0,
                                  description="Revert an applied wrong edit (else keep it: noise).")
    revert_delay_s: tuple[float, float] = Field(default=(60.0, 900.0), description="Revert this long after "
                                                "applying.")
    snapshot_delay_s: float = Field(default=1800.0, gt=0, le=86_400, description="Periodic snapshot of an edited "
                                    "file this long after the apply, after every revert; the file gets no other "
                                    "edit before it. Keep it equal to the reward spec's persistence horizon "
                                    "(rewards.horizon_s), whose label reads the latest snapshot at or before it.")
    cleanup_delay_s: float = Field(default=3600.0, gt=0, le=7 * 86_400, description="A kept edit the task "
                                   "generator cannot represent is rewritten by the user this long after the apply "
                                   "(past the persistence horizon; the file is locked until then).")
    followup_delay_s: tuple[float, float] = Field(default=(10.0, 120.0), description="Writing a follow-up message.")
    p_complain_wrong: float = Field(default=0.8, ge=0.0, le=1.0, description="Dissatisfied follow-up after a "
                                    "wrong edit.")
    p_complain_broken: float = Field(default=0.9, ge=0.0, le=1.0, description="Dissatisfied follow-up after an "
                                     "edit that could not apply or a malformed tool call.")
    p_complain_correct: float = Field(default=0.02, ge=0.0, le=1.0, description="Dissatisfied follow-up after a "
                                      "correct edit (noise).")
    p_thanks_correct: float = Field(default=0.3, ge=0.0, le=1.0, description="Satisfied follow-up after a correct "
                                    "edit.")
    p_complain_needless: float = Field(default=0.9, ge=0.0, le=1.0, description="'Why are you asking? Just do it' "
                                       "after a question on a clear request (else a plain retry of the request).")
    p_answer_question: float = Field(default=0.95, ge=0.0, le=1.0, description="Answer the clarifying question on "
                                     "an ambiguous request (else drop the task).")
    p_retry: float = Field(default=0.5, ge=0.0, le=1.0, description="After a complaint about a rejected or broken "
                                "edit, send it as the next turn (the policy tries again).")
    max_turns: int = Field(default=3, ge=1, le=20, description="Policy turns per task at most.")

    # -- background tasks (long loops: the user judges the whole result hours later) --
    background_rate: float = Field(default=0.0, ge=0.0, le=1.0, description="Share of tasks the user hands to "
                                   "the agent in the background: several steps, each a request (with retries "
                                   "after a tool error), in a session of its own; the user judges the whole result "
                                   "hours later with a task_outcome. 0 = none (the default population).")
    background_steps: tuple[int, int] = Field(default=(2, 4), description="Steps (one file each) of a background "
                                              "task, [min, max].")
    outcome_delay_s: tuple[float, float] = Field(default=(1800.0, 14_400.0), description="The user judges a "
                                                 "background task this long after its last step, [min, max].")
    p_accept_clean: float = Field(default=0.9, ge=0.0, le=1.0, description="A background task whose every step "
                                  "is right is accepted (half of those merged); else abandoned (noise).")
    p_accept_partial: float = Field(default=0.3, ge=0.0, le=1.0, description="One with at least half of its "
                                    "steps right is accepted; else reverted or abandoned.")
    p_revert_failed: float = Field(default=0.6, ge=0.0, le=1.0, description="A background task that is not "
                                   "accepted is reverted (else abandoned).")
    p_rating: float = Field(default=0.5, ge=0.0, le=1.0, description="Share of task outcomes that carry a "
                            "1-5 rating.")

    # -- where it runs --
    endpoint: str = Field(default="", description="The policy's OpenAI-compatible base URL; '' = "
                          "http://{serving.host}:{serving.port}/v1.")
    model: str = Field(default="", description="Model name sent; '' = the first one the endpoint lists.")
    request_timeout_s: float = Field(default=120.0, gt=0, le=3600, description="Wall seconds per policy call.")
    telemetry: Literal["kafka", "collector"] = Field(default="kafka", description="How events leave: the SDK "
                                                     "straight to Kafka, or through the ingest collector (API key "
                                                     "from the RTRL_COLLECTOR_API_KEY environment variable).")

    @field_validator("think_s", "session_gap_s", "apply_delay_s", "revert_delay_s", "followup_delay_s",
                     "outcome_delay_s")
    @classmethod
    def _range(cls, v: tuple[float, float]) -> tuple[float, float]:
        lo, hi = v
        if not 0 <= lo <= hi <= 7 * 86_400:
            raise ValueError(f"must be [min, max] seconds with 0 <= min <= max <= 604800, got {list(v)}")
        return v

    @field_validator("background_steps")
    @classmethod
    def _steps(cls, v: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= v[0] <= v[1] <= 15:
            raise ValueError(f"must be [min, max] steps with 1 <= min <= max <= 15, got {list(v)}")
        return v

    @field_validator("start_time")
    @classmethod
    def _start(cls, v: str) -> str:
        if v:
            from schemas.instants import parse_instant   # here: the `schemas` package imports pyarrow

            parse_instant(v)      # ValueError says what is wrong
        return v

    @field_validator("keyword_only_orgs")
    @classmethod
    def _org_ids(cls, v: list[str]) -> list[str]:
        from codetasks.workspace import ORG_ID

        bad = [o for o in v if not ORG_ID.match(o)]
        if bad:
            raise ValueError(f"keyword_only_orgs: {bad} are not simulated org ids (o0, o1, ...)")
        return v

    def org(self, index: int):
        """Org `index` of the population: its naming style (`org_of`) and house rule (`keyword_only_orgs`)."""
        from dataclasses import replace

        from codetasks.workspace import org_of

        org = org_of(index, self.seed)
        return replace(org, kwonly=org.org_id in self.keyword_only_orgs) if self.keyword_only_orgs else org

    def users_of(self, org_id: str) -> range:
        """The indexes of org `org_id`'s users (user i is in org i mod `orgs`); empty for an org not simulated."""
        from codetasks.workspace import ORG_ID

        match = ORG_ID.match(org_id)
        k = int(match.group(1)) if match else self.orgs
        return range(k, self.users, self.orgs) if k < self.orgs else range(0)

    @model_validator(mode="after")
    def _snapshot_after_reverts(self):
        if self.snapshot_delay_s <= self.revert_delay_s[1]:
            raise ValueError(f"snapshot_delay_s ({self.snapshot_delay_s:g}) must be after the latest revert "
                             f"(revert_delay_s max {self.revert_delay_s[1]:g}), or the snapshot misses reverts")
        if self.cleanup_delay_s <= self.snapshot_delay_s:
            raise ValueError(f"cleanup_delay_s ({self.cleanup_delay_s:g}) must be after snapshot_delay_s "
                             f"({self.snapshot_delay_s:g})")
        return self
