"""The production gateway's telemetry client: a trajectory is in the SDK's write-ahead log when `emit` returns
(before the request is answered), unless `serving.telemetry_write_ahead` and `sdk.write_ahead` are both off."""

from __future__ import annotations

import pytest

import instrumentation
from infra.config import load_config
from instrumentation.spool_format import read_record
from serving.server import build_gateway, spool_dir
from tests.unit.instrumentation.factories import FakeTransport, decoded, trajectory
from tests.unit.serving.fakes import FakeLoader, FakeRegistry


def logged_event_ids(wal_dir) -> list[str]:
    records = []
    for path in sorted(wal_dir.glob("seg-*.log")):
        with open(path, "rb") as f:
            while (record := read_record(f)[0]) is not None:
                records.append(record)
    return [d["event_id"] for d in decoded(records)]


@pytest.mark.parametrize("write_ahead", [True, False])
def test_a_trajectory_is_in_the_write_ahead_log_when_serving_emit_returns(tmp_path, monkeypatch, write_ahead):
    cfg = load_config(None, [f'state_dir="{tmp_path}"', f"serving.telemetry_write_ahead={str(write_ahead).lower()}"])
    hung = FakeTransport()  # never acknowledges while held: nothing is retired from the log
    hung.hold()
    monkeypatch.setattr(instrumentation, "KafkaTransport", lambda *a, **kw: hung, raising=False)
    gw = build_gateway(cfg, registry=FakeRegistry({"control": "1", "champion": "2"}), loader=FakeLoader())
    try:
        event = trajectory()
        gw.emit(event)
        wal_dir = spool_dir(cfg) / "wal"
        assert (logged_event_ids(wal_dir) == [event.event_id]) if write_ahead else not wal_dir.exists()
    finally:
        hung.release()
        gw._on_close()
