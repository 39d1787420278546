"""What one evaluation episode produced: the record the harness writes and the gate, the report and the
benchmark read. One `Episode` per (task, sample, arm); the gate pairs a candidate's and a champion's episodes by
(task_id, sample) — the same task with the same seed.

An episode is an *infrastructure failure* (`infra_error` set) when the harness, the endpoint or the sandbox broke
(a refused connection, a 5xx, bubblewrap failing to start), not the model: such episodes say nothing about the
checkpoint and are excluded from both arms of the comparison. A model that loops, writes a fork bomb or times out
is the model's failure, not the infrastructure's (`resolved` False).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Episode:
    task_id: str
    sample: int                      # the sample index k of K; the sampling seed derives from (task_id, k)
    arm: str                         # "candidate" | "champion" (or any label; the gate pairs two of them)
    category: str = ""               # task.toml category, for the per-category breakdown
    cluster: str = ""                # task.toml repo cluster
    resolved: bool = False           # every hidden fail-to-pass and pass-to-pass test passed
    infra_error: str | None = None   # why the infrastructure failed (episode excluded), else None
    turns: int = 0                   # model responses
    tool_calls: int = 0              # calls attempted, broken ones included
    broken_tool_calls: int = 0       # calls that did not parse/validate or could not execute (e.g. edit old text missing)
    edited: bool = False             # at least one edit_file applied to the work dir
    asked: bool = False              # the model asked a clarifying question at some turn
    ambiguous: bool = False          # the task needs a question (task.toml `ambiguous`): asking is right
    completion_tokens: int = 0
    prompt_tokens: int = 0
    latency_ms: float = 0.0          # summed wall time of the model requests
    seconds: float = 0.0             # the whole episode, grading included
    policy_version: str = ""
    transcript: list[dict[str, Any]] = field(default_factory=list)   # messages exchanged, tool results included
    notes: dict[str, Any] = field(default_factory=dict)              # grading details (failed tests, ...)

    @property
    def valid(self) -> bool:
        return self.infra_error is None

    @property
    def broken(self) -> bool:
        """The episode had at least one broken tool call (the guardrail's unit)."""
        return self.broken_tool_calls > 0

    @property
    def needless_question(self) -> bool:
        """The model asked although the task was clear (the clarification guardrail's unit): a question on an
        ambiguous task is the right first move, not a cost."""
        return self.asked and not self.ambiguous

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        return cls(**d)
