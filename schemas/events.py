"""Every event type (docs/events.md), at its current schema version.

Each class says who produces it (`PRODUCERS`) and who consumes it (`CONSUMERS`); `rtrl schemas export` writes
this into the JSON Schema description. Older versions are upgraded by `schemas.compat` before validation.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from schemas.envelope import SAFE_ID, Event, Text

Fingerprint = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]
"""A normalized-line fingerprint: 64-bit BLAKE2b of the whitespace-normalized line, hex. Never the code itself."""

FileId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=SAFE_ID)]
"""A file inside a workspace, as a stable id (the SDK hashes the workspace-relative path)."""

RequestId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=SAFE_ID)]

MAX_TOKENS = 65_536
MAX_LINES = 200_000
MAX_INT64 = 2**63 - 1
"""Integers are int64 on disk (`schemas.arrow`): a larger one would validate here and crash the Parquet writer."""
TokenId = Annotated[int, Field(ge=0, le=MAX_INT64)]


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ToolCallStatus(str, Enum):
    ok = "ok"
    parse_error = "parse_error"            # the call text did not parse as a tool call
    validation_error = "validation_error"  # parsed, but arguments did not validate against the tool's schema


class ToolCallRecord(_Part):
    """One tool call in a model response, as judged by serving's strict parser."""

    name: Text = Field(max_length=128, description="Tool name as the model wrote it ('' when unparseable).")
    status: ToolCallStatus
    error: Text = Field(default="", max_length=2048, description="Why the call is broken; '' when ok.")


class Hunk(_Part):
    """One changed region of a file: where it starts in the old file, how many old lines it replaces, and the
    fingerprints of the lines it inserted or changed (the lines whose persistence is measured)."""

    old_start: int = Field(ge=0, le=MAX_LINES)
    old_count: int = Field(ge=0, le=MAX_LINES)
    new_fingerprints: list[Fingerprint] = Field(default_factory=list, max_length=MAX_LINES)


class ResponseKind(str, Enum):
    edit = "edit"            # the response proposes an edit (edit_file calls)
    question = "question"    # the response only asks the user a question (clarification)
    answer = "answer"        # a plain answer, no edit
    unknown = "unknown"      # not reported (events written before v3)


class Trajectory(Event):
    """One served request: what the policy saw and sampled, with the behaviour log-probs the trainer needs.

    v2 added the sampling parameters, so the trainer can tell which distribution the logprobs describe.
    v3 added `response_kind`, so the reward job can apply clarification deferral to question-only responses.
    v4 added `group_id` (the samples of one request with n > 1 share it: the trainer's group baseline) and
    `cut_short` (a streamed answer whose client disconnected before it ended: the tokens are what was sampled
    until then).
    v5 added `task_id`: the background task the request belongs to, joined with that task's `task_outcome`.
    """

    EVENT_TYPE: ClassVar[str] = "trajectory"
    SCHEMA_VERSION: ClassVar[int] = 5
    CONTENT_FIELDS: ClassVar[tuple[str, ...]] = ("prompt_token_ids", "completion_token_ids", "behaviour_logprobs")
    PRODUCERS: ClassVar[str] = "serving (one per request)"
    CONSUMERS: ClassVar[str] = "archiver, reward job (joins), trainer (token ids, logprobs), A/B metrics (latency)"

    event_type: Literal["trajectory"] = "trajectory"
    schema_version: int = SCHEMA_VERSION
    request_id: RequestId
    policy_version: str = Field(min_length=1, max_length=128, pattern=SAFE_ID,
                                description="Registry version that served it.")
    arm: str = Field(min_length=1, max_length=64, pattern=SAFE_ID, description="A/B arm the user is assigned to.")
    prompt_token_ids: list[TokenId] = Field(default_factory=list, max_length=MAX_TOKENS)
    completion_token_ids: list[TokenId] = Field(default_factory=list, max_length=MAX_TOKENS)
    behaviour_logprobs: list[Annotated[float, Field(le=0.0)]] = Field(
        default_factory=list, max_length=MAX_TOKENS,
        description="Log-prob of each sampled completion token under the distribution it was sampled from.")
    tool_calls: list[ToolCallRecord] = Field(default_factory=list, max_length=256)
    latency_ms: float = Field(ge=0)
    prompt_tokens: int = Field(ge=0, le=MAX_INT64)
    completion_tokens: int = Field(ge=0, le=MAX_INT64)
    temperature: float = Field(default=1.0, ge=0, description="v2: sampling temperature used.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="v2: nucleus mass used (1 = untruncated).")
    top_k: int = Field(default=-1, ge=-1, le=MAX_INT64, description="v2: top-k used (-1 = untruncated).")
    response_kind: ResponseKind = Field(default=ResponseKind.unknown,
                                        description="v3: what the response does (edit, question, answer).")
    group_id: str | None = Field(default=None, min_length=1, max_length=128, pattern=SAFE_ID,
                                 description="v4: shared by the samples of one request with n > 1 (a prompt group "
                                             "for the trainer's group baseline); None for a single sample.")
    cut_short: bool = Field(default=False, description="v4: the client disconnected from a streamed answer before "
                            "it ended; the completion is what had been sampled by then.")
    task_id: str | None = Field(default=None, min_length=1, max_length=128, pattern=SAFE_ID,
                                description="v5: the background task this request works on (the client names it); "
                                            "its task_outcome event rewards every request of the task (the chain). "
                                            "None for an interactive request.")

    @model_validator(mode="after")
    def _logprobs_match_tokens(self):
        if not self.privacy_mode and len(self.behaviour_logprobs) != len(self.completion_token_ids):
            raise ValueError(
                f"behaviour_logprobs has {len(self.behaviour_logprobs)} entries but completion_token_ids has "
                f"{len(self.completion_token_ids)}: one log-prob per sampled token is required")
        return self


class SuggestionShown(Event):
    EVENT_TYPE: ClassVar[str] = "suggestion_shown"
    PRODUCERS: ClassVar[str] = "client (editor / agent) when a suggested edit is displayed"
    CONSUMERS: ClassVar[str] = "archiver, reward job (edit rate), A/B metrics"

    event_type: Literal["suggestion_shown"] = "suggestion_shown"
    schema_version: int = 1
    request_id: RequestId
    file_id: FileId
    hunks: list[Hunk] = Field(default_factory=list, max_length=4096)


class EditApplied(Event):
    EVENT_TYPE: ClassVar[str] = "edit_applied"
    PRODUCERS: ClassVar[str] = "client when the user accepts (applies) a suggested edit"
    CONSUMERS: ClassVar[str] = "archiver, reward job (edit persistence join), A/B metrics"

    event_type: Literal["edit_applied"] = "edit_applied"
    schema_version: int = 1
    request_id: RequestId
    file_id: FileId
    hunks: list[Hunk] = Field(default_factory=list, max_length=4096)


class RejectReason(str, Enum):
    user = "user"
    superseded = "superseded"
    conflict = "conflict"


class EditRejected(Event):
    EVENT_TYPE: ClassVar[str] = "edit_rejected"
    PRODUCERS: ClassVar[str] = "client when the user rejects or discards a suggested edit"
    CONSUMERS: ClassVar[str] = "archiver, reward job (rejected edits persist 0), A/B metrics"

    event_type: Literal["edit_rejected"] = "edit_rejected"
    schema_version: int = 1
    request_id: RequestId
    file_id: FileId
    reason: RejectReason = RejectReason.user


class SnapshotTrigger(str, Enum):
    periodic = "periodic"
    save = "save"


class CodebaseSnapshot(Event):
    EVENT_TYPE: ClassVar[str] = "codebase_snapshot"
    PRODUCERS: ClassVar[str] = "client, periodically and on save"
    CONSUMERS: ClassVar[str] = "archiver, reward job (state of the file at the persistence horizon)"

    event_type: Literal["codebase_snapshot"] = "codebase_snapshot"
    schema_version: int = 1
    file_id: FileId
    trigger: SnapshotTrigger = SnapshotTrigger.periodic
    line_fingerprints: list[Fingerprint] = Field(default_factory=list, max_length=MAX_LINES)


class FollowupMessage(Event):
    EVENT_TYPE: ClassVar[str] = "followup_message"
    CONTENT_FIELDS: ClassVar[tuple[str, ...]] = ("text",)
    PRODUCERS: ClassVar[str] = "client when the user sends a message in a session (text redacted by the SDK)"
    CONSUMERS: ClassVar[str] = "archiver, reward job (dissatisfied follow-up classifier, clarification deferral)"

    event_type: Literal["followup_message"] = "followup_message"
    schema_version: int = 1
    previous_request_id: RequestId | None = Field(default=None, description="The request this message answers.")
    text: Text = Field(default="", max_length=100_000)


class ToolErrorKind(str, Enum):
    none = "none"
    parse_error = "parse_error"          # model's fault: call did not parse
    validation_error = "validation_error"  # model's fault: bad arguments
    tool_error = "tool_error"            # model's fault: e.g. file not found, edit did not apply
    timeout = "timeout"                  # tool ran out of time
    infrastructure = "infrastructure"    # not the model's fault (sandbox died, network); never a negative


class ToolCallResult(Event):
    EVENT_TYPE: ClassVar[str] = "tool_call_result"
    CONTENT_FIELDS: ClassVar[tuple[str, ...]] = ("error_message",)
    PRODUCERS: ClassVar[str] = "client or eval harness after executing a tool call"
    CONSUMERS: ClassVar[str] = "archiver, reward job (broken tool calls are hard negatives), A/B metrics"

    event_type: Literal["tool_call_result"] = "tool_call_result"
    schema_version: int = 1
    request_id: RequestId
    tool: Text = Field(min_length=1, max_length=128)
    call_index: int = Field(default=0, ge=0, le=255)
    ok: bool
    error_kind: ToolErrorKind = ToolErrorKind.none
    error_message: Text = Field(default="", max_length=4096)

    @model_validator(mode="after")
    def _ok_has_no_error(self):
        if self.ok and self.error_kind is not ToolErrorKind.none:
            raise ValueError("ok tool call must have error_kind 'none'")
        if not self.ok and self.error_kind is ToolErrorKind.none:
            raise ValueError("failed tool call needs an error_kind other than 'none'")
        return self


class TaskOutcomeKind(str, Enum):
    accepted = "accepted"      # the user accepted the task's result (kept the changes)
    merged = "merged"          # the result was merged (e.g. its pull request)
    reverted = "reverted"      # the result was undone
    abandoned = "abandoned"    # the user dropped the task without using its result


class TaskOutcome(Event):
    """How a background agent task ended, judged by the user on the whole result, often hours after its last
    request. The reward job joins it to every trajectory of the task (same org, workspace and `task_id`) whose
    request time is within the long horizon before it: one outcome reward shared by the whole chain."""

    EVENT_TYPE: ClassVar[str] = "task_outcome"
    PRODUCERS: ClassVar[str] = "client (agent or editor) when a background task's result is accepted, merged, " \
                               "reverted or abandoned"
    CONSUMERS: ClassVar[str] = "archiver, reward job (task outcome join), A/B metrics (long-loop outcome rates)"

    event_type: Literal["task_outcome"] = "task_outcome"
    schema_version: int = 1
    task_id: str = Field(min_length=1, max_length=128, pattern=SAFE_ID,
                         description="The task, as its trajectories name it.")
    outcome: TaskOutcomeKind
    rating: int | None = Field(default=None, ge=1, le=5, description="The user's optional rating, 1 (worst) to 5.")


EVENT_TYPES: dict[str, type[Event]] = {
    cls.EVENT_TYPE: cls
    for cls in (Trajectory, SuggestionShown, EditApplied, EditRejected, CodebaseSnapshot, FollowupMessage,
                ToolCallResult, TaskOutcome)
}
CURRENT_VERSIONS: dict[str, int] = {name: cls.SCHEMA_VERSION for name, cls in EVENT_TYPES.items()}
