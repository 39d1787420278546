"""Supervised background processes for the local stack: pid file, log file, health wait, clean stop.

Each process runs in its own session (process group) so `stop` takes its children with it: nothing is orphaned. Its
output is appended to `<state_dir>/logs/<name>.log`, rotated by size (infra.stack.logs) when it starts and, with the
configured bounds, by the orchestrator's housekeeping.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from infra.stack.logs import LOG_KEEP, LOG_MAX_BYTES, rotate


# `ManagedProcess.start(..., extra={LEADER_STOPS_GROUP: True})`: `stop` signals the leader only, which stops its
# children itself (a gateway finishes its requests, then shuts its engines down), not every process at once
LEADER_STOPS_GROUP = "leader_stops_group"


class StackError(RuntimeError):
    pass


class PortTaken(StackError):
    """Something else holds the port."""


def port_is_free(host: str, port: int) -> bool:
    """True if (host, port) can be bound; False if something holds it. A host that is not an address of this
    machine is a configuration error, reported as such."""
    try:
        hold_port(host, port).close()
    except PortTaken:
        return False
    return True


def hold_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), not yet listening: the port is ours from now on, while a server loads what
    it needs before it accepts (connections are refused until it listens). PortTaken when something holds it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise PortTaken(f"port {port} on {host} is taken") from None
        raise StackError(f"cannot bind {host}:{port}: {e.strerror or e} (is {host!r} an address of this "
                         "machine?)") from None
    return sock


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether GET `url` answers 200 (a server's health check while it starts)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def pid_running(pid: int) -> bool:
    """Whether process `pid` exists on this host and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _proc_start_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[19])  # starttime: tells a reused pid from ours
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class ManagedProcess:
    name: str
    state_dir: Path
    log_max_bytes: int = LOG_MAX_BYTES     # its log is rotated at start when over this (infra.stack.logs)
    log_keep: int = LOG_KEEP

    @property
    def pidfile(self) -> Path:
        return self.state_dir / "run" / f"{self.name}.json"

    @property
    def logfile(self) -> Path:
        return self.state_dir / "logs" / f"{self.name}.log"

    def info(self) -> dict | None:
        """What was recorded at start (pid, argv, extra), or None if not running."""
        try:
            rec = json.loads(self.pidfile.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if _proc_start_ticks(rec["pid"]) != rec.get("start_ticks"):
            return None
        return rec if pid_running(rec["pid"]) else None     # a zombie is not running

    def is_running(self) -> bool:
        return self.info() is not None

    def start(self, argv: list[str], env: dict[str, str] | None = None, extra: dict | None = None) -> dict:
        if (rec := self.info()) is not None:
            return rec
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        rotate(self.logfile, self.log_max_bytes, self.log_keep)
        with open(self.logfile, "ab") as log:
            log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env={**os.environ, **(env or {})}, close_fds=True)
        rec = {"pid": proc.pid, "start_ticks": _proc_start_ticks(proc.pid), "argv": argv,
               "started_at": time.time(), **(extra or {})}
        tmp = self.pidfile.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec))
        tmp.replace(self.pidfile)
        self._popen = proc  # keep a handle so the child is reaped if we are its parent
        return rec

    def renice(self, niceness: int) -> bool:
        """Lower the running process's share of the CPU to `niceness`, so it yields to the rest when both want it;
        raising it needs no privilege. Two settings, for the two ways Linux may schedule it: the nice value of every
        thread of its process group (threads and children started later inherit it), and, where the kernel groups
        processes by session (`kernel.sched_autogroup_enabled`: each session then gets an equal share whatever its
        threads' nice values, and every managed process is a session), its session's group. Returns whether
        something was running."""
        rec = self.info()
        if rec is None:
            return False
        try:
            os.setpriority(os.PRIO_PGRP, rec["pid"], niceness)  # Linux: each thread of each process in the group
        except ProcessLookupError:
            return False
        try:
            Path(f"/proc/{rec['pid']}/autogroup").write_text(str(niceness))
        except OSError:
            pass    # a kernel without autogroups: the threads' nice values are what counts
        return True

    def wait_healthy(self, check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running():
                raise StackError(f"{self.name} exited during start-up; last lines of {self.logfile}:\n"
                                 f"{self.log_tail()}")
            if check():
                return
            time.sleep(0.2)
        raise StackError(f"{self.name} did not become healthy ({what}) within {timeout_s:.0f}s; "
                         f"last lines of {self.logfile}:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 10.0) -> bool:
        """SIGTERM the process group (see `_terminate`), SIGKILL after `timeout_s`. Returns whether something was
        running."""
        return bool(stop_together([self], timeout_s))

    def _terminate(self) -> tuple[int, bool] | None:
        """SIGTERM the process group, or only its leader when it was started with `LEADER_STOPS_GROUP` in `extra`
        (it stops its children itself, in order). (its pid, whether only the leader was signalled), or None (and no
        pid file) when nothing was running."""
        rec = self.info()
        if rec is None:
            self.pidfile.unlink(missing_ok=True)
            return None
        leader_only = bool(rec.get(LEADER_STOPS_GROUP))
        try:
            if leader_only:
                os.kill(rec["pid"], signal.SIGTERM)
            else:
                os.killpg(rec["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
        return rec["pid"], leader_only

    def _finish_stop(self, pid: int, leader_only: bool) -> None:
        """SIGKILL the group of `pid` while its leader still runs (a leader that stopped its children itself:
        SIGTERM to anything it left behind); wait until the leader is gone; remove the pid file."""
        sig = signal.SIGKILL if self._alive(pid) else signal.SIGTERM if leader_only else None
        if sig is not None:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
        while self._alive(pid):
            time.sleep(0.05)
        self.pidfile.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL at once (fault injection, tests)."""
        rec = self.info()
        if rec is not None:
            try:
                os.killpg(rec["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
            while self._alive(rec["pid"]):
                time.sleep(0.02)

    def _alive(self, pid: int) -> bool:
        popen = getattr(self, "_popen", None)
        if popen is not None and popen.pid == pid:
            return popen.poll() is None
        return pid_running(pid)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def stop_together(procs: list[ManagedProcess], timeout_s: float = 10.0) -> list[str]:
    """Stop several managed processes at once: SIGTERM every group (a `LEADER_STOPS_GROUP` one: its leader), wait up
    to `timeout_s` for all of them together, SIGKILL what is left. Returns the names of those that were running. (One after the other, a stack
    of slow stoppers costs the sum of their shutdowns; together, the longest.)"""
    running = [(p, *t) for p in procs if (t := p._terminate()) is not None]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p._alive(pid) for p, pid, _ in running):
        time.sleep(0.05)
    for p, pid, leader_only in running:
        p._finish_stop(pid, leader_only)
    return [p.name for p, _, _ in running]
