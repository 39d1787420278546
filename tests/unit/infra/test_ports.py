"""Ports: `hold_port` makes the port a server will listen on its own from start-up on (a taken one is named), and
the free ports picked for private stacks lie below the kernel's ephemeral range."""

import socket

import pytest

from infra.stack.process import StackError, hold_port
from tests.conftest import free_port


def test_a_held_port_cannot_be_bound_by_another_process_until_it_is_closed():
    port = free_port()
    sock = hold_port("127.0.0.1", port)
    try:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        with socket.socket() as probe:       # bound, not listening: a client is refused, not left hanging
            assert probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        sock.close()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))


@pytest.mark.integration
def test_holding_a_taken_port_names_the_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(StackError, match=f"port {port} on 127.0.0.1 is taken"):
            hold_port("127.0.0.1", port)


def test_the_picked_free_ports_lie_below_the_kernels_ephemeral_range():
    from infra.bench.ports import ephemeral_low
    from tests.conftest import free_port_pair

    assert all(20000 <= p < ephemeral_low() for p in (free_port(), free_port_pair() + 1))


def test_rtrl_port_range_narrows_the_picked_ports_to_its_slice_and_a_bad_one_is_refused(monkeypatch):
    from infra.bench.ports import RANGE_ENV, free_ports, port_range

    monkeypatch.setenv(RANGE_ENV, "21000-21010")
    assert port_range() == (21000, 21010)
    assert all(21000 <= p and p + 1 < 21010 for p in (free_ports(2) for _ in range(3)))
    for bad in ("21000", "21010-21000", "100-200", "a-b"):
        monkeypatch.setenv(RANGE_ENV, bad)
        with pytest.raises(ValueError, match=RANGE_ENV):
            port_range()
