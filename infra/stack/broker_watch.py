"""`broker-watch`: enforces the topics' retention on the embedded broker's log over storage "s3", and logs a warning
line each time the log's process passes `kafka.memory_warn_bytes`.

The embedded Tansu (0.6) keeps its log in memory: inside the broker over storage "memory", inside the object store
process over "s3" (moto holds its objects in memory). Tansu deletes no record by a topic's retention.ms or
retention.bytes over either (its maintenance does nothing for these engines and its DeleteRecords is not
implemented). Over "s3" this watcher does it: every `kafka.retention_interval_s` it deletes the record batches past
their topic's retention that no consumer group still needs, from the object store (infra/stack/log_retention.py),
and logs a line when it deleted some. Over "memory" nothing can reach the log, and it grows with the traffic until
the broker restarts.

`rtrl up` starts this watcher next to the broker (infra/stack/broker.py); every `INTERVAL_S` it reads the resident
memory (VmRSS) of the process that holds the log and prints, to its log (<state_dir>/logs/broker-watch.log), one
warning when it passes the bound and one line when it falls back under (`MemoryWatch`). It follows the process
across restarts (the pid file), and exits once the process's pid file is gone (a clean stop; `rtrl down` stops the
watcher too).

    python -m infra.stack.broker_watch --state-dir DIR --process broker --bound BYTES
    python -m infra.stack.broker_watch --state-dir DIR --process objectstore --bound BYTES \
        --object-store http://127.0.0.1:19093 --retention-interval 60
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import datetime, timezone
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
    enforced: bool = False      # this watcher deletes the log's batches past retention (storage "s3")

    def observe(self, resident: int) -> str | None:
        who = HOLDERS.get(self.holder, self.holder)
        if not self.above and resident > self.bound:
            self.above = True
            why = ("It holds the records of the retention window (kafka.retention_s) and those a consumer group "
                   "still needs: lower kafka.retention_s, or raise the bound." if self.enforced else
                   "It deletes no record by topic retention, so the log grows until the broker restarts (over "
                   "storage \"memory\" the log is lost then: let the archiver catch up first); storage \"s3\" with "
                   "kafka.retention_interval_s, or a Kafka cluster (kafka.bootstrap_servers), enforces "
                   "kafka.retention_s.")
            return (f"WARNING {NAME}: the embedded broker's in-memory Kafka log passed kafka.memory_warn_bytes: "
                    f"{who} holds {_gib(resident)} resident (bound {_gib(self.bound)}). {why}")
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


def enforce_retention(retention, log) -> None:
    """One pass of `LogRetention.enforce`; a store that cannot be reached (restarting, say) is logged and tried
    again at the next pass."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        done = retention.enforce(datetime.now(timezone.utc))
    except (BotoCoreError, ClientError, OSError) as e:
        log(f"{NAME}: could not enforce the retention this time: {type(e).__name__}: {e}")
        return
    if done.deleted:
        log(f"{NAME}: {done.line()}")


def watch(state_dir: Path, process: str, bound: int, interval_s: float = INTERVAL_S, log=print,
          object_store: str = "", retention_interval_s: float = 0.0) -> None:
    """Until `process`'s pid file is gone: poll its resident memory every `interval_s` and log each crossing of
    `bound` (0: no bound); with `object_store` (the broker's over storage "s3"), enforce the topics' retention there
    every `retention_interval_s`."""
    from infra.stack.log_retention import LogRetention

    proc = ManagedProcess(process, state_dir)
    retention = LogRetention(object_store) if object_store and retention_interval_s > 0 else None
    w = MemoryWatch(bound, process, enforced=retention is not None)
    if bound:
        log(f"{NAME}: watching {HOLDERS.get(process, process)}, warning past {_gib(bound)} resident "
            f"(kafka.memory_warn_bytes), every {interval_s:.0f}s")
    if retention is not None:
        log(f"{NAME}: enforcing the topics' retention on the log in {object_store} every "
            f"{retention_interval_s:g}s (kafka.retention_interval_s)")
    next_enforce = time.monotonic()
    while proc.pidfile.exists():
        rec = proc.info()
        if rec is not None and bound:
            try:
                resident = resident_bytes(Path(f"/proc/{rec['pid']}/status").read_text())
            except OSError:
                resident = None
            if resident is not None and (line := w.observe(resident)):
                log(line)
        if rec is not None and retention is not None and time.monotonic() >= next_enforce:
            enforce_retention(retention, log)
            next_enforce = time.monotonic() + retention_interval_s
        time.sleep(min(interval_s, retention_interval_s) if retention is not None else interval_s)
    log(f"{NAME}: {process} stopped; done")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m infra.stack.broker_watch", description=__doc__.split("\n")[0])
    p.add_argument("--state-dir", required=True, type=Path)
    p.add_argument("--process", required=True, choices=sorted(HOLDERS))
    p.add_argument("--bound", required=True, type=int)
    p.add_argument("--interval", type=float, default=INTERVAL_S)
    p.add_argument("--object-store", default="", help="the broker's object store (storage \"s3\"): enforce the "
                   "topics' retention there")
    p.add_argument("--retention-interval", type=float, default=0.0, help="seconds between two passes (0: none)")
    args = p.parse_args(argv)
    watch(args.state_dir, args.process, args.bound, args.interval, log=lambda line: print(line, flush=True),
          object_store=args.object_store, retention_interval_s=args.retention_interval)


if __name__ == "__main__":
    main()
