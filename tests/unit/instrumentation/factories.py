"""Events and a controllable in-memory transport for the SDK's tests."""

from __future__ import annotations

import json
import random
import threading
import uuid
from datetime import datetime, timezone

import pytest

from instrumentation.transport import Record, TransportError
from schemas.events import (CodebaseSnapshot, EditApplied, FollowupMessage, Hunk, ToolCallRecord, ToolCallResult,
                            ToolCallStatus, ToolErrorKind, Trajectory)

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
both_emit_modes = pytest.mark.parametrize("write_ahead", [False, True], ids=["queue", "write_ahead"])
"""Runs a test with the client's `sdk.write_ahead` off and on (the test passes `write_ahead` to `make_client`)."""
_rng = random.Random(7)


def new_id() -> str:
    return str(uuid.UUID(int=_rng.getrandbits(128), version=4))


def envelope(**kw) -> dict:
    base = dict(event_id=new_id(), event_time=NOW, user_id="user-1", org_id="org-1", workspace_id="ws-1",
                session_id="sess-1", client_version="1.2.3")
    base.update(kw)
    return base


def followup(text: str = "that is not what I asked for", **kw) -> FollowupMessage:
    return FollowupMessage(**envelope(**kw), previous_request_id="req-1", text=text)


def edit(i: int = 0, **kw) -> EditApplied:
    return EditApplied(**envelope(**kw), request_id=f"req-{i}", file_id="file-1",
                       hunks=[Hunk(old_start=abs(i), old_count=1, new_fingerprints=["0123456789abcdef"])])


def snapshot(**kw) -> CodebaseSnapshot:
    return CodebaseSnapshot(**envelope(**kw), file_id="file-1", line_fingerprints=["0123456789abcdef"] * 3)


def tool_result(error_message: str = "", **kw) -> ToolCallResult:
    ok = not error_message
    return ToolCallResult(**envelope(**kw), request_id="req-1", tool="read_file", ok=ok,
                          error_kind=ToolErrorKind.none if ok else ToolErrorKind.tool_error,
                          error_message=error_message)


def trajectory(tool_error: str = "", **kw) -> Trajectory:
    return Trajectory(**envelope(**kw), request_id="req-1", policy_version="3", arm="control",
                      prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5], behaviour_logprobs=[-0.1, -0.2],
                      tool_calls=[ToolCallRecord(name="edit_file", status=ToolCallStatus.validation_error,
                                                 error=tool_error)],
                      latency_ms=12.5, prompt_tokens=3, completion_tokens=2)


def decoded(records: list[Record]) -> list[dict]:
    return [json.loads(r.value) for r in records]


class FakeTransport:
    """Keeps what it is sent. `failing = True` makes sends raise TransportError; `hold()` makes the next send
    block (after setting `entered`) until `release()`."""

    def __init__(self):
        self.records: list[Record] = []
        self.batches: list[int] = []
        self.failing = False
        self.failures = 0
        self.closed = False
        self.entered = threading.Event()
        self._gate = threading.Event()
        self._gate.set()
        self._lock = threading.Lock()

    def hold(self) -> None:
        self.entered.clear()
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def send(self, records) -> None:
        self.entered.set()
        self._gate.wait(30)
        with self._lock:
            if self.failing:
                self.failures += 1
                raise TransportError("broker unreachable (test)")
            self.records.extend(records)
            self.batches.append(len(records))

    def close(self) -> None:
        self.closed = True

    def event_ids(self) -> list[str]:
        with self._lock:
            return [d["event_id"] for d in decoded(self.records)]

    def events(self) -> list[dict]:
        with self._lock:
            return decoded(self.records)
