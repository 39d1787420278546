"""Kafka topics: which event family travels where. Producers: SDK / collector / serving. Consumer: archiver,
reward job. Messages are keyed by `user_id` so one user's events stay ordered within a partition."""

from __future__ import annotations

TELEMETRY_TOPICS: dict[str, str] = {
    "suggestion_shown": "telemetry.edits",
    "edit_applied": "telemetry.edits",
    "edit_rejected": "telemetry.edits",
    "codebase_snapshot": "telemetry.snapshots",
    "followup_message": "telemetry.followups",
    "tool_call_result": "telemetry.tools",
    "task_outcome": "telemetry.outcomes",
}
TRAJECTORY_TOPIC = "trajectories"
DEAD_LETTER_TOPIC = "dead-letter"

TOPICS: tuple[str, ...] = tuple(sorted(set(TELEMETRY_TOPICS.values()))) + (TRAJECTORY_TOPIC, DEAD_LETTER_TOPIC)
EVENT_TOPICS: tuple[str, ...] = tuple(t for t in TOPICS if t != DEAD_LETTER_TOPIC)


def topic_for(event_type: str) -> str:
    if event_type == "trajectory":
        return TRAJECTORY_TOPIC
    try:
        return TELEMETRY_TOPICS[event_type]
    except KeyError:
        raise ValueError(f"no topic for unknown event type {event_type!r}") from None
