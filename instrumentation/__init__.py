"""The telemetry SDK: how editor, agent and harness clients report what users did, without sending code.

    from instrumentation import TelemetryClient, KafkaTransport, line_fingerprints, file_id

    client = TelemetryClient(KafkaTransport(bootstrap), cfg.sdk, spool_dir, name="editor")
    client.emit(EditApplied(..., file_id=file_id("src/app.py"),
                            hunks=[Hunk(old_start=10, old_count=2, new_fingerprints=line_fingerprints(new_code))]))
    client.close()

Public API:
    TelemetryClient                 -- emit (non-blocking), flush, close, stats; spools to disk when sending fails
    KafkaTransport, Transport, Record, TransportError -- where batches go (the HTTP collector client also fits)
    redact                          -- secret redaction applied to every free-text field before sending
    line_fingerprints, normalize_line, file_id -- hashes that stand in for code lines and file paths

The names are imported on first use, so `import instrumentation.config` (the CLI's config loading) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "TelemetryClient": "instrumentation.sdk",
    "KafkaTransport": "instrumentation.transport",
    "Transport": "instrumentation.transport",
    "Record": "instrumentation.transport",
    "TransportError": "instrumentation.transport",
    "redact": "instrumentation.redaction",
    "line_fingerprints": "instrumentation.fingerprint",
    "normalize_line": "instrumentation.fingerprint",
    "file_id": "instrumentation.fingerprint",
}
__all__ = list(_EXPORTS)

if TYPE_CHECKING:
    from instrumentation.fingerprint import file_id, line_fingerprints, normalize_line
    from instrumentation.redaction import redact
    from instrumentation.sdk import TelemetryClient
    from instrumentation.transport import KafkaTransport, Record, Transport, TransportError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'instrumentation' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
