"""Free local ports for private stacks (benchmarks, the chaos loop, tests), below the kernel's ephemeral range.

A port the kernel hands out to outgoing connections (Kafka clients, vLLM's sockets) or to binds to port 0 can be
taken by one of them in the minute between picking it and the bind of a server that first loads its engines
(serving lost its port that way in CI). Ports below that range are handed out only by whoever names them.

RTRL_PORT_RANGE="LOW-HIGH" narrows the range to [LOW, HIGH) for this process and the processes it starts: parallel
test workers each take a slice of their own (tests/conftest.py), so two never pick the same port.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST = 20000
RANGE_ENV = "RTRL_PORT_RANGE"
_handed_out: set[int] = set()


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_range() -> tuple[int, int]:
    """[low, high): LOWEST up to the ephemeral range, or the slice RTRL_PORT_RANGE names (within those bounds)."""
    low, high = LOWEST, ephemeral_low()
    value = os.environ.get(RANGE_ENV, "")
    if value:
        try:
            lo, hi = (int(x) for x in value.split("-"))
        except ValueError:
            raise ValueError(f"{RANGE_ENV}={value!r}: expected LOW-HIGH, e.g. 20000-26000") from None
        if not low <= lo < hi <= high:
            raise ValueError(f"{RANGE_ENV}={value!r} must lie within {low}-{high} (below the ephemeral range)")
        low, high = lo, hi
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int = 1) -> int:
    """A port P such that P .. P+n-1 are free now, in `port_range()`, and not handed out before by this process."""
    low, high = port_range()
    high -= n
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(low, high)
        span = set(range(port, port + n))
        if span & _handed_out or not all(_bindable(p) for p in span):
            continue
        _handed_out.update(span)
        return port
    raise RuntimeError(f"no {n} free consecutive ports in {low}..{high}")


def free_port(pair: bool = False) -> int:
    """A port nothing listens on; with `pair`, one whose successor is free too (the broker and its object store)."""
    return free_ports(2 if pair else 1)
