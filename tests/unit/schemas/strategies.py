"""Hypothesis strategies that build valid events of every type (used by the round-trip property tests)."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import strategies as st

from schemas.events import (CodebaseSnapshot, EditApplied, EditRejected, FollowupMessage, Hunk, RejectReason, ResponseKind,
                            SnapshotTrigger, SuggestionShown, ToolCallRecord, ToolCallResult, ToolCallStatus,
                            ToolErrorKind, Trajectory)

ids = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)   # SAFE_ID
times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                     timezones=st.just(timezone.utc))
fingerprints = st.lists(st.text("0123456789abcdef", min_size=16, max_size=16), max_size=20)
texts = st.text(max_size=200)


def envelope() -> dict:
    return dict(event_id=st.uuids(version=4).map(str), event_time=times, received_time=st.none() | times,
                user_id=ids, org_id=ids, workspace_id=ids, session_id=ids, client_version=ids)


def _with_privacy(cls, **fields):
    """Build either an ordinary event or its privacy-mode form (content emptied)."""
    return st.builds(cls, **envelope(), **fields).flatmap(
        lambda e: st.sampled_from([e, e.without_content()]))


hunks = st.lists(st.builds(Hunk, old_start=st.integers(0, 10_000), old_count=st.integers(0, 10_000),
                           new_fingerprints=fingerprints), max_size=5)


@st.composite
def trajectories(draw):
    completion = draw(st.lists(st.integers(0, 200_000), max_size=30))
    logprobs = draw(st.lists(st.floats(max_value=0.0, allow_nan=False, allow_infinity=False),
                             min_size=len(completion), max_size=len(completion)))
    calls = draw(st.lists(st.builds(ToolCallRecord, name=st.text(max_size=20),
                                    status=st.sampled_from(ToolCallStatus), error=texts), max_size=4))
    fields = {k: draw(v) for k, v in envelope().items()}
    e = Trajectory(**fields, request_id=draw(ids), policy_version=draw(ids), arm=draw(ids),
                   prompt_token_ids=draw(st.lists(st.integers(0, 200_000), max_size=30)),
                   completion_token_ids=completion, behaviour_logprobs=logprobs, tool_calls=calls,
                   latency_ms=draw(st.floats(0, 1e6)), prompt_tokens=draw(st.integers(0, 10**6)),
                   completion_tokens=draw(st.integers(0, 10**6)), temperature=draw(st.floats(0, 2)),
                   top_p=draw(st.floats(0.01, 1)), top_k=draw(st.integers(-1, 1000)),
                   response_kind=draw(st.sampled_from(ResponseKind)))
    return draw(st.sampled_from([e, e.without_content()]))


@st.composite
def tool_call_results(draw):
    ok = draw(st.booleans())
    kind = ToolErrorKind.none if ok else draw(st.sampled_from([k for k in ToolErrorKind if k is not ToolErrorKind.none]))
    fields = {k: draw(v) for k, v in envelope().items()}
    e = ToolCallResult(**fields, request_id=draw(ids), tool=draw(ids), call_index=draw(st.integers(0, 255)),
                       ok=ok, error_kind=kind, error_message="" if ok else draw(texts))
    return draw(st.sampled_from([e, e.without_content()]))


any_event = st.one_of(
    trajectories(),
    _with_privacy(SuggestionShown, request_id=ids, file_id=ids, hunks=hunks),
    _with_privacy(EditApplied, request_id=ids, file_id=ids, hunks=hunks),
    _with_privacy(EditRejected, request_id=ids, file_id=ids, reason=st.sampled_from(RejectReason)),
    _with_privacy(CodebaseSnapshot, file_id=ids, trigger=st.sampled_from(SnapshotTrigger),
                  line_fingerprints=fingerprints),
    _with_privacy(FollowupMessage, previous_request_id=st.none() | ids, text=texts),
    tool_call_results(),
)
