"""Fixtures for the SDK's tests: a controllable transport and clients that are closed after each test."""

import pytest

from instrumentation.config import SdkConfig
from instrumentation.sdk import TelemetryClient
from tests.unit.instrumentation.factories import FakeTransport, edit


def config(**kw) -> SdkConfig:
    return SdkConfig(**{"linger_ms": 5, "retry_interval_s": 0.05, "batch_size": 50, **kw})


@pytest.fixture
def transport():
    return FakeTransport()


@pytest.fixture
def make_client(tmp_path, transport):
    clients = []

    def make(transport=transport, spool_dir=tmp_path / "spool", **kw):
        c = TelemetryClient(transport, config(**kw), spool_dir, name="test")
        clients.append(c)
        return c

    yield make
    transport.release()
    for c in clients:
        c.close(timeout=5)


@pytest.fixture
def hold_sender():
    """Park the sender inside `send` with one event, so the queue fills without being drained."""
    def hold(client, transport):
        transport.hold()
        client.emit(edit(-1))
        assert transport.entered.wait(5)
    return hold
