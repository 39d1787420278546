"""The reward table: one row per served request, emitted by the reward job when mature (docs/rewards.md).

Produced by: the Beam reward job (`pipelines/rewards`). Consumed by: the data-quality suite, the trainer (token
ids, behaviour log-probs, reward, policy_version) and the A/B metrics (components, arm). Keyed by `request_id`:
writing a row twice overwrites it (idempotent). Every component is stored beside the scalar, with the version of
the reward spec that computed it. Privacy-mode requests never produce a row. Fields with a default were added
later: a table written before them reads with the default (`schemas.reward_table.read_reward_table`).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class EditStatus(str, Enum):
    applied = "applied"    # an edit_applied event within the apply window: persistence is judged from snapshots
    rejected = "rejected"  # rejected (or shown and never applied within the window): persists 0
    none = "none"          # no edit suggested: the persistence component does not apply


class PersistenceLabel(str, Enum):
    known = "known"                    # applied: a snapshot after the apply, at or before the horizon, was found;
                                       # rejected (or shown, never applied): persistence is 0 by definition
    unknown = "unknown"                # applied, but no such snapshot: excluded from the reward, counted
    not_applicable = "not_applicable"  # no edit suggested, or the applied edits inserted no line


class FollowupStatus(str, Enum):
    none = "none"                  # no follow-up message within the window
    satisfied = "satisfied"
    dissatisfied = "dissatisfied"


class ServedRequest(BaseModel):
    """Who and what served a request: the leading columns of every per-request table (reward and outcome rows)."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    policy_version: str
    arm: str
    user_id: str
    org_id: str
    workspace_id: str
    session_id: str
    request_time: datetime = Field(description="event_time of the trajectory (UTC).")


class RewardRow(ServedRequest):
    mature_time: datetime = Field(description="request_time + the longest window + allowed lateness: the "
                                              "event time after which the row can no longer change.")
    response_kind: str
    group_id: str | None = Field(default=None, description="The trajectory's group_id: the samples of one request "
                                 "with n > 1 share it (the trainer's prompt group); None for a single sample.")
    cut_short: bool = Field(default=False, description="The trajectory's cut_short: the client left the stream "
                            "before the answer ended, so the completion is what was sampled by then (the trainer "
                            "drops such rows unless trainer.train_on_cut_short).")
    task_id: str | None = Field(default=None, description="The trajectory's task_id: a background task's request, "
                                "which trains when its task's outcome row comes out (schemas.outcomes), not before.")
    # what the trainer needs
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    behaviour_logprobs: list[float]
    temperature: float
    top_p: float
    top_k: int
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    # components (raw observations)
    tool_calls: int
    broken_tool_calls: int = Field(description="Calls that failed to parse/validate, or errored for a "
                                               "model-caused reason (configurable kinds). Never dropped.")
    edit_status: EditStatus
    edit_lines: int = Field(description="Inserted/changed lines of the applied edits.")
    persistence: float | None = Field(description="Fraction of those lines present at the horizon; None unless "
                                                  "persistence_label is 'known'.")
    persistence_label: PersistenceLabel
    followup_status: FollowupStatus
    question_unnecessary: bool = Field(description="The follow-up says the question was not needed.")
    deferred_to_request_id: str | None = Field(description="For a question-only response: the next turn whose "
                                                           "edit outcome it inherits.")
    # weighted contributions (sum, clipped = reward)
    r_persistence: float
    r_followup: float
    r_broken_tool: float
    r_deferral: float
    r_length: float
    reward_unclipped: float
    reward: float
    spec_version: str = Field(description="Version (hash) of the reward spec that computed this row.")
