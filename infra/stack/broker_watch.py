"""`broker-watch`: a warning line each time the embedded broker's in-memory Kafka log passes `kafka.memory_warn_bytes`.

The embedded Tansu (0.6) keeps its whole log in memory: inside the broker over storage "memory", inside the object
store process over "s3" (moto holds its objects in memory). Neither deletes records by a topic's retention.ms
(Tansu's maintenance does nothing for these engines and its DeleteRecords is not implemented), so the log grows
with the traffic until the broker restarts. `rtrl up` starts this watcher next to the broker (infra/stack/broker.py);
every `INTERVAL_S` it reads the resident memory (VmRSS) of the process that holds the log and prints, to its log
(<state_dir>/logs/broker-watch.log), one warning when it passes the bound and one line when it falls back under
(`MemoryWatch`). It follows the process across restarts (the pid file), and exits once the process's pid file is
gone (a clean stop; `rtrl down` stops the watcher too).

    python -m infra.stack.broker_watch --state-dir DIR --process broker --bound BYTES
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from infra.stack.process import ManagedProcess

NAME = "broker-watch"
INTERVAL_S = 10.0
REARM = 0.9      # back under the bound once below this fraction of it: a value wobbling at the bound warns once
HOLDERS = {"broker": "the broker (storage \"memory\")", "objectstore": "the object store (storage \"s3\")"}


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


@dataclass
class MemoryWatch:
    """Once per crossing: a warning when the resident bytes pass `bound` from at or under it, a line when they fall
    back under REARM x bound; None otherwise."""

    bound: int
    holder: str = "broker"
    above: bool = False

    def observe(self, resident: int) -> str | None:
        who = HOLDERS.get(self.holder, self.holder)
        if not self.above and resident > self.bound:
            self.above = True
            return (f"WARNING {NAME}: the embedded broker's in-memory Kafka log passed kafka.memory_warn_bytes: "
                    f"{who} holds {_gib(resident)} resident (bound {_gib(self.bound)}). It deletes no record by "
                    "topic retention, so the log grows until the broker restarts (over storage \"memory\" the log "
                    "is lost then: let the archiver catch up first); a Kafka cluster (kafka.bootstrap_servers) "
                    "enforces kafka.retention_s.")
        if self.above and resident < REARM * self.bound:
            self.above = False
            return f"{NAME}: {who} is back under kafka.memory_warn_bytes: {_gib(resident)} resident"
        return None


def resident_bytes(status: str) -> int | None:
    """VmRSS from the text of /proc/<pid>/status, in bytes; None when it has none (a zombie)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024      # the kernel reports kB
    return None


def watch(state_dir: Path, process: str, bound: int, interval_s: float = INTERVAL_S, log=print) -> None:
    """Poll `process`'s resident memory every `interval_s` until its pid file is gone; log each crossing."""
    proc = ManagedProcess(process, state_dir)
    w = MemoryWatch(bound, process)
    log(f"{NAME}: watching {HOLDERS.get(process, process)}, warning past {_gib(bound)} resident "
        f"(kafka.memory_warn_bytes), every {interval_s:.0f}s")
    while proc.pidfile.exists():
        rec = proc.info()
        if rec is not None:
            try:
                resident = resident_bytes(Path(f"/proc/{rec['pid']}/status").read_text())
            except OSError:
                resident = None
            if resident is not None and (line := w.observe(resident)):
                log(line)
        time.sleep(interval_s)
    log(f"{NAME}: {process} stopped; done")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m infra.stack.broker_watch", description=__doc__.split("\n")[0])
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--process", required=True, choices=sorted(HOLDERS))
    p.add_argument("--bound", required=True, type=int)
    p.add_argument("--interval", type=float, default=INTERVAL_S)
    args = p.parse_args(argv)
    watch(args.state_dir, args.process, args.bound, args.interval, log=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
