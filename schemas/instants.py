"""ISO 8601 instants as the command line, the config and the wire take them: a zone is required ('Z' allowed),
the result is UTC.

    parse_instant("2026-11-01T00:00Z")   # -> datetime(2026, 11, 1, tzinfo=timezone.utc)
"""

from __future__ import annotations

from datetime import datetime, timezone


def parse_instant(text: str) -> datetime:
    """The instant as UTC; ValueError saying what is wrong (not ISO 8601, or no time zone)."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-01T00:00Z)") from None
    if t.tzinfo is None:
        raise ValueError(f"{text!r} needs a time zone (e.g. a trailing Z for UTC)")
    return t.astimezone(timezone.utc)
