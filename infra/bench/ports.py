"""Free local ports for the benchmarks' private stacks."""

from __future__ import annotations

import socket


def free_port(pair: bool = False) -> int:
    """A port nothing listens on; with `pair`, one whose successor is free too (the broker and its object store)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not pair:
            return port
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
