"""A command run by the warm step runner (`infra.orchestrator.warm_runner`), with the part of `subprocess.Popen`'s
interface that `RtrlCli` uses: text `stdout` and `stderr`, `wait(timeout)`, `terminate()`, `kill()`, `returncode`.

    proc = WarmProcess.start(socket_path, ["rewards", "--cycle", "c3"], env, cwd)   # None: no warm runner there
    RtrlCli(..., spawn=warm_spawner(socket_path))     # the demo's steps: children of its warm runner when it answers
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
from pathlib import Path

from infra.orchestrator.warm_runner import MAX_REQUEST, connect

LOST = 255     # the exit code reported when the runner went away before telling the child's


class WarmProcess:
    def __init__(self, conn: socket.socket, pid: int, argv: list[str], stdout, stderr):
        self.conn, self.pid, self.args = conn, pid, argv
        self.stdout, self.stderr = stdout, stderr
        self.returncode: int | None = None

    @classmethod
    def start(cls, path: Path, argv: list[str], env: dict[str, str], cwd: str | Path) -> "WarmProcess | None":
        """Start `rtrl ARGV` in a child of the runner at `path`; None when no runner answers there (the caller
        starts a new process instead)."""
        if (conn := connect(path)) is None:
            return None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            request = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd)}).encode()
            socket.send_fds(conn, [request], [out_w, err_w])
            reply = json.loads(conn.recv(MAX_REQUEST) or b"{}")
        except (OSError, ValueError):
            reply = {}
        finally:
            os.close(out_w)
            os.close(err_w)
        if "pid" not in reply:
            conn.close()
            os.close(out_r)
            os.close(err_r)
            return None
        stdout = open(out_r, encoding="utf-8", errors="replace")
        stderr = open(err_r, encoding="utf-8", errors="replace")
        return cls(conn, int(reply["pid"]), list(argv), stdout, stderr)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if not self._ready(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        try:
            reply = json.loads(self.conn.recv(MAX_REQUEST) or b"{}")
        except (OSError, ValueError):
            reply = {}
        self.returncode = int(reply.get("exit", LOST))
        self.conn.close()
        return self.returncode

    def _ready(self, timeout: float | None) -> bool:
        readable, _, _ = select.select([self.conn], [], [], timeout)
        return bool(readable)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def warm_spawner(path: Path):
    """`RtrlCli`'s `spawn`: start each command as a child of the warm runner listening at `path` (None when none
    answers there, and the command starts a new interpreter)."""
    def spawn(argv: list[str], env: dict[str, str], cwd: str | Path) -> WarmProcess | None:
        return WarmProcess.start(path, argv, env, cwd)

    return spawn
