"""Small event builders for reward tests: one workspace, one session, times relative to T0."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import polars as pl

from schemas.events import (CodebaseSnapshot, EditApplied, EditRejected, FollowupMessage, Hunk, SuggestionShown,
                            TaskOutcome, ToolCallRecord, ToolCallResult, Trajectory)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
FP = {c: f"{i + 1:016x}" for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def env(t: float, **kw) -> dict:
    return dict(event_id=kw.pop("event_id", str(uuid.uuid4())), event_time=at(t), user_id=kw.pop("user_id", "u1"),
                org_id=kw.pop("org_id", "o1"), workspace_id=kw.pop("workspace_id", "ws1"), session_id=kw.pop("session_id", "s1"),
                client_version="test/1", privacy_mode=kw.pop("privacy_mode", False))


def trajectory(rid: str, t: float = 0, *, kind: str = "edit", tokens: int = 0, calls: tuple[str, ...] = (),
               group_id: str | None = None, cut_short: bool = False, task_id: str | None = None, **kw):
    e = env(t, **kw)
    return Trajectory(**e, request_id=rid, policy_version="1", arm="treatment",
                      prompt_token_ids=[] if e["privacy_mode"] else [1, 2],
                      completion_token_ids=[] if e["privacy_mode"] else [3] * tokens,
                      behaviour_logprobs=[] if e["privacy_mode"] else [-0.5] * tokens,
                      tool_calls=[ToolCallRecord(name="edit_file", status=s) for s in calls],
                      latency_ms=10, prompt_tokens=2, completion_tokens=tokens, response_kind=kind,
                      group_id=group_id, cut_short=cut_short, task_id=task_id)


def applied(rid: str, t: float, lines: str, file: str = "f1", **kw):
    return EditApplied(**env(t, **kw), request_id=rid, file_id=file,
                       hunks=[Hunk(old_start=1, old_count=1, new_fingerprints=[FP[c] for c in lines])])


def shown(rid: str, t: float, file: str = "f1", **kw):
    return SuggestionShown(**env(t, **kw), request_id=rid, file_id=file, hunks=[])


def shown_lines(rid: str, t: float, lines: str, file: str = "f1", **kw):
    """A suggestion shown with its changed lines (one fingerprint per character of `lines`)."""
    return SuggestionShown(**env(t, **kw), request_id=rid, file_id=file,
                           hunks=[Hunk(old_start=1, old_count=1, new_fingerprints=[FP[c] for c in lines])])


def rejected(rid: str, t: float, file: str = "f1", **kw):
    return EditRejected(**env(t, **kw), request_id=rid, file_id=file)


def snapshot(t: float, lines: str, file: str = "f1", **kw):
    return CodebaseSnapshot(**env(t, **kw), file_id=file, line_fingerprints=[FP[c] for c in lines])


def followup(rid: str, t: float, text: str, **kw):
    return FollowupMessage(**env(t, **kw), previous_request_id=rid, text=text)


def task_outcome(task: str, t: float, outcome: str, rating: int | None = None, **kw):
    return TaskOutcome(**env(t, **kw), task_id=task, outcome=outcome, rating=rating)


def tool_result(rid: str, t: float, kind: str, **kw):
    return ToolCallResult(**env(t, **kw), request_id=rid, tool="run_terminal", ok=kind == "none", error_kind=kind)


class WordClassifier:
    """A transparent classifier for formula tests: 'wrong' -> dissatisfied, "didn't need to ask" -> unnecessary."""

    name, version = "test-words", "1"

    def classify(self, texts: pl.Series) -> pl.DataFrame:
        t = texts.fill_null("").str.to_lowercase()
        return pl.DataFrame({"dissatisfied": t.str.contains("wrong", literal=True),
                             "question_unnecessary": t.str.contains("didn't need to ask", literal=True)})
