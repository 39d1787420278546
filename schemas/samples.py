"""Deterministic, realistic-sized sample events of every type (benchmarks, smoke checks, docs).

The mix follows what an editor sends: snapshots dominate, then suggestion/edit events, trajectories (with a few
hundred token ids and log-probs), follow-ups and tool-call results. Not a simulator: no behaviour, just shapes.
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta, timezone

from schemas.envelope import Event
from schemas.events import (CodebaseSnapshot, EditApplied, EditRejected, FollowupMessage, Hunk, SuggestionShown,
                            ToolCallRecord, ToolCallResult, ToolCallStatus, ToolErrorKind, Trajectory)

MIX = (("codebase_snapshot", 35), ("suggestion_shown", 15), ("edit_applied", 10), ("edit_rejected", 5),
       ("trajectory", 15), ("followup_message", 10), ("tool_call_result", 10))


def _fp(rng: random.Random, n: int) -> list[str]:
    return [f"{rng.getrandbits(64):016x}" for _ in range(n)]


def sample_events(n: int, seed: int = 0, start: datetime | None = None) -> list[Event]:
    rng = random.Random(seed)
    t0 = start or datetime(2026, 11, 1, tzinfo=timezone.utc)
    kinds = [k for k, w in MIX for _ in range(w)]
    out: list[Event] = []
    for i in range(n):
        user = rng.randrange(200)
        env = dict(event_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                   event_time=t0 + timedelta(milliseconds=250 * i), user_id=f"u{user}", org_id=f"org{user % 7}",
                   workspace_id=f"ws{user}", session_id=f"s{user}-{i // 500}", client_version="bench/1.0")
        rid, fid = f"r{i // 4}", f"f{rng.randrange(40)}"
        kind = rng.choice(kinds)
        if kind == "codebase_snapshot":
            e: Event = CodebaseSnapshot(**env, file_id=fid, line_fingerprints=_fp(rng, rng.randrange(20, 80)))
        elif kind in ("suggestion_shown", "edit_applied"):
            cls = SuggestionShown if kind == "suggestion_shown" else EditApplied
            e = cls(**env, request_id=rid, file_id=fid,
                    hunks=[Hunk(old_start=rng.randrange(200), old_count=rng.randrange(4),
                                new_fingerprints=_fp(rng, rng.randrange(1, 8)))])
        elif kind == "edit_rejected":
            e = EditRejected(**env, request_id=rid, file_id=fid)
        elif kind == "trajectory":
            k = rng.randrange(20, 200)
            e = Trajectory(**env, request_id=rid, policy_version="1", arm=rng.choice(["control", "treatment"]),
                           prompt_token_ids=[rng.randrange(4096) for _ in range(rng.randrange(50, 300))],
                           completion_token_ids=[rng.randrange(4096) for _ in range(k)],
                           behaviour_logprobs=[-rng.random() * 3 for _ in range(k)],
                           tool_calls=[ToolCallRecord(name="edit_file", status=ToolCallStatus.ok)],
                           latency_ms=rng.uniform(50, 900), prompt_tokens=100, completion_tokens=k)
        elif kind == "followup_message":
            e = FollowupMessage(**env, previous_request_id=rid,
                                text=rng.choice(["thanks", "that is wrong, revert it", "now add a test"]))
        else:
            ok = rng.random() < 0.8
            e = ToolCallResult(**env, request_id=rid, tool="run_terminal", ok=ok,
                               error_kind=ToolErrorKind.none if ok else ToolErrorKind.tool_error,
                               error_message="" if ok else "exit status 1")
        out.append(e)
    return out
