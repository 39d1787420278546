"""`rtrl simulate` refuses clearly when the policy endpoint or Kafka is not there."""

from __future__ import annotations

import pytest

import socket

from infra.cli import main
from tests.unit.simulator.mock_server import MockServing


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_is_a_clear_error(capsys, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    rc = main(["--set", f'state_dir="{tmp_path}"', "simulate", "--duration", "1", "--endpoint", url])
    err = capsys.readouterr().err
    assert rc == 1 and f"the policy endpoint {url} is not reachable" in err and "start serving first" in err


@pytest.mark.integration
def test_an_unreachable_broker_is_a_clear_error(capsys, tmp_path):
    with MockServing() as serving:
        rc = main(["--set", f'state_dir="{tmp_path}"', "--set", f"kafka.port={_closed_port()}", "simulate",
                   "--sim-hours", "1", "--endpoint", serving.url])
    err = capsys.readouterr().err
    assert rc == 1 and "is not reachable (start the stack with `rtrl up`)" in err and not serving.ids


def test_bad_arguments_name_the_setting(capsys, tmp_path):
    rc = main(["--set", f'state_dir="{tmp_path}"', "simulate", "--duration", "1", "--users", "0"])
    assert rc == 1 and "--users: Input should be greater than or equal to 1" in capsys.readouterr().err


def test_telemetry_goes_to_kafka_or_through_the_collector_with_a_key(monkeypatch, tmp_path):
    import pytest

    from infra.commands.simulate import API_KEY_ENV, _transport
    from instrumentation.collector_client import CollectorTransport
    from tests.conftest import make_config

    cfg = make_config(tmp_path, "simulator.telemetry=collector")
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with pytest.raises(ValueError, match=API_KEY_ENV):
        _transport(cfg)
    monkeypatch.setenv(API_KEY_ENV, "k" * 32)
    transport, where = _transport(cfg)
    assert isinstance(transport, CollectorTransport) and where == f"collector {transport.url}"
    transport.close()
