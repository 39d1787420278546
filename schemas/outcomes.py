"""The task-outcome table: one row per request of a background task, the outcome of the whole task shared by every
request of it (the chain), emitted by the reward job beside the reward table (docs/rewards.md, "Long loops").

Produced by: the Beam reward job (`pipelines/rewards/outcomes.py`). Consumed by: the trainer (it weights the
chain's samples by `r_outcome`, reading their tokens from the reward table by `request_id`) and the A/B metrics
(long-loop outcome rates per arm). Keyed by `request_id`: writing a row twice overwrites it (idempotent).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from pydantic import Field

from schemas.rewards import ServedRequest


class OutcomeLabel(str, Enum):
    known = "known"        # a task_outcome of the task arrived within the long horizon after the request
    unknown = "unknown"    # none by the long horizon: no outcome reward (r_outcome 0), counted


class OutcomeRow(ServedRequest):
    task_id: str
    mature_time: datetime = Field(description="The outcome's time + outcome_lateness_s when known, else "
                                              "request_time + long_horizon_s + outcome_lateness_s.")
    outcome_label: OutcomeLabel
    outcome: str = Field(description="accepted, merged, reverted or abandoned; '' when unknown.")
    rating: int | None = Field(description="The outcome's rating (1-5), None when it has none or is unknown.")
    outcome_time: datetime | None = Field(description="event_time of the task_outcome; None when unknown.")
    outcome_event_id: str | None = Field(description="The task_outcome that decided the row; None when unknown.")
    chain_requests: int = Field(description="Requests of the task this outcome rewards (this one included): "
                                            "the chain's length as the join saw it.")
    r_outcome: float = Field(description="The outcome reward shared by the chain, clipped (0 when unknown).")
    spec_version: str = Field(description="Version (hash) of the reward spec that computed this row.")
