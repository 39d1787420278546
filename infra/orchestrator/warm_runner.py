"""The warm step runner: one process that imports the heavy libraries once (torch, transformers, Beam, Great
Expectations, MLflow, polars) and forks a child for each `rtrl` command a cycle step asks for.

A step's command started as a new interpreter spends 15-40 s on this 2-core machine importing those libraries
before it does any work (13.5 s when the machine is idle, more while serving and the users hold the cores), and a
cycle runs five such commands. A child forked from this process starts with them imported. Each command still
gets a process of its own (its memory, its crash, its exit code), its own stdout and stderr (the client's pipes,
passed over the socket), its environment, working directory and argv, and it exits the way `python -m infra.cli`
does (SystemExit, threads joined, atexit handlers).

    python -m infra.orchestrator.warm_runner --socket <state_dir>/run/steps.sock    # `rtrl demo` starts it

Protocol (AF_UNIX, SOCK_SEQPACKET: one message each way per datagram): the client sends one JSON request
{"argv": [...], "env": {...}, "cwd": "..."} with two file descriptors (stdout, stderr); the runner answers
{"pid": N}, then {"exit": code} when the child has ended. A client that goes away before its child ends takes the
child with it (SIGTERM): a step's command must not outlive its runner. The socket is bound only after the
imports, so a client that can connect is talking to a warm runner; one that cannot falls back to a new process.

Nothing is imported here that starts threads of its own before the fork (CUDA and vLLM are left out for that
reason); libraries with idle native threads (jemalloc's background threads) handle a fork themselves. The modules a
step loads lazily count too: transformers' model classes, MLflow's SQL store and DeepSpeed with the torch.compile
stack its optimizer check imports were 33 % of a cycle's `rtrl train` on a loaded 2-core machine (py-spy: ~55 s of
~170 s; 8 s when idle). DeepSpeed picks its accelerator at import, so it is preloaded only by a torch built without
CUDA, with DS_ACCELERATOR=cpu as the trainer sets it (`trainer.engine`); with CUDA each trainer imports it itself.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import pkgutil
import select
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

PRELOAD = ("torch", "transformers", "polars", "pyarrow", "mlflow", "apache_beam", "great_expectations", "kafka",
           "infra.cli", "transformers.models.auto.modeling_auto", "transformers.models.llama.modeling_llama",
           "mlflow.store.tracking.sqlalchemy_store")
CPU_PRELOAD = ("deepspeed", "deepspeed.runtime.zero.muon.muon_optimizer")   # with a torch built without CUDA
MAX_REQUEST = 1 << 20
SOCKET_NAME = "steps.sock"
PROCESS_NAME = "steps"        # its pid and log files: <state_dir>/run/steps.json, <state_dir>/logs/steps.log
PATH_MAX = 100          # AF_UNIX paths are limited to 107 bytes


def socket_path(state_dir: str | Path) -> Path:
    """Where the warm runner of a state dir listens."""
    return Path(state_dir) / "run" / SOCKET_NAME


def usable_path(path: Path) -> bool:
    return len(os.fsencode(str(path))) <= PATH_MAX


def start_background(state_dir: str | Path) -> Path | None:
    """Start the state dir's warm runner in the background (`rtrl down` stops it); its socket path, or None when
    the path is too long for a socket. It listens once its imports are done; until then clients start processes."""
    from infra.stack.process import ManagedProcess

    path = socket_path(state_dir)
    if not usable_path(path):
        return None
    ManagedProcess(PROCESS_NAME, Path(state_dir)).start(
        [sys.executable, "-m", "infra.orchestrator.warm_runner", "--socket", str(path)])
    return path


def connect(path: Path) -> socket.socket | None:
    """A connection to the runner listening at `path`, or None when none listens there (no socket file, a stale
    one, or a path too long for AF_UNIX)."""
    if not usable_path(path) or not path.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return None
    return conn


def cpu_only_torch() -> bool:
    """Whether the installed torch was built without CUDA (asked without initialising any device)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.version.cuda is None and getattr(torch.version, "hip", None) is None


def preload(modules=PRELOAD, log=print) -> None:
    t0 = time.monotonic()
    asked = list(modules)
    import infra.commands

    names = asked + [f"infra.commands.{m.name}" for m in pkgutil.iter_modules(infra.commands.__path__)]
    if asked and cpu_only_torch():      # with the heavy preload (tests of the protocol ask for none)
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        names += CPU_PRELOAD
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:          # a module that cannot load here loads (or fails) in the child, as before
            log(f"warm runner: not preloaded {name}: {type(e).__name__}: {e}")
    log(f"warm runner: {len(names)} modules imported in {time.monotonic() - t0:.1f}s")


class _Stop(Exception):
    pass


def serve(path: Path, log=print) -> dict | None:
    """Listen at `path` until SIGTERM/SIGINT. Returns None in the runner when it stops; returns the request in each
    forked child (which then runs it as its main program: `run_request`)."""
    def stop(signum, frame):
        raise _Stop

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(str(tmp))
    server.listen(16)
    os.replace(tmp, path)           # a client never finds a socket that is not yet listening
    me, mine = os.getpid(), os.stat(path).st_ino
    log(f"warm runner: listening at {path} (pid {me})")
    children: dict[int, socket.socket | None] = {}   # child pid -> the client waiting for its exit (None: gone)
    try:
        while True:
            conns = [c for c in children.values() if c is not None]
            try:
                readable, _, _ = select.select([server, *conns], [], [], 0.2)
            except InterruptedError:
                readable = []
            for sock in readable:
                if sock is server:
                    conn, _ = server.accept()
                    request = _fork(server, conn, children, log)
                    if request is not None:       # the child: leave the loop and run the command
                        return request
                elif _gone(sock):                 # a waiting client went away: its command goes too
                    pid = next(p for p, c in children.items() if c is sock)
                    log(f"warm runner: the client of pid {pid} went away; stopping it")
                    children[pid] = None
                    sock.close()
                    _signal(pid, signal.SIGTERM)
            _reap(children, log)
    except _Stop:
        log("warm runner: stopping")
        for pid in children:
            _signal(pid, signal.SIGTERM)
        return None
    finally:
        if os.getpid() == me:
            server.close()
            try:
                if os.stat(path).st_ino == mine:     # not a newer runner's socket
                    path.unlink()
            except OSError:
                pass


def _fork(server: socket.socket, conn: socket.socket, children: dict, log) -> dict | None:
    fds: list[int] = []
    try:
        data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
        if not data and not fds:                 # connected and left: a probe
            conn.close()
            return None
        request = json.loads(data)
        if len(fds) != 2 or not isinstance(request.get("argv"), list):
            raise ValueError("expected a JSON request with argv and two file descriptors")
    except (OSError, ValueError) as e:
        log(f"warm runner: bad request: {e}")
        _send(conn, {"error": str(e)})
        conn.close()
        for fd in fds:
            os.close(fd)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        server.close()
        for c in children.values():
            if c is not None:
                c.close()
        conn.close()
        request["fds"] = fds
        return request
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    _send(conn, {"pid": pid})
    log(f"warm runner: pid {pid}: rtrl {' '.join(request['argv'])}")
    return None


def _gone(conn: socket.socket) -> bool:
    try:
        return not conn.recv(MAX_REQUEST, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True


def _reap(children: dict, log) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        conn = children.pop(pid, None)
        log(f"warm runner: pid {pid} exited {code}")
        if conn is not None:
            _send(conn, {"exit": code})
            conn.close()


def _send(conn: socket.socket, msg: dict) -> None:
    try:
        conn.send(json.dumps(msg).encode())
    except OSError:
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def run_request(request: dict) -> int:
    """In the forked child: become `python -m infra.cli ARGV` with the client's stdio, environment and cwd."""
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out, err = request["fds"]
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in (devnull, out, err):
        os.close(fd)
    sys.stdout.reconfigure(write_through=True)
    sys.stderr.reconfigure(write_through=True)
    os.chdir(request.get("cwd") or ".")
    os.environ.clear()
    os.environ.update(request.get("env") or {})
    sys.argv = ["rtrl", *request["argv"]]
    from infra.cli import main as cli_main

    try:
        code = cli_main(list(request["argv"]))
    except SystemExit as e:
        code = e.code
    except BaseException:
        traceback.print_exc()
        code = 1
    return _exit(code)


def _exit(code) -> int:
    """End the child as the interpreter would (code as SystemExit takes it; non-daemon threads joined; atexit
    handlers, weakref finalizers among them; stdio flushed), without tearing down the modules one by one: that
    takes seconds with torch and Beam loaded and has no effect on the command's result."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code & 0xFF)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.orchestrator.warm_runner",
                                     description="Fork `rtrl` commands from a process with the heavy libraries "
                                                 "already imported (the cycle steps of `rtrl demo`).")
    parser.add_argument("--socket", required=True, help="the AF_UNIX socket to listen at")
    parser.add_argument("--preload", default=",".join(PRELOAD),
                        help="comma-separated modules to import before listening (infra.commands.* always)")
    args = parser.parse_args(argv)
    path = Path(args.socket)
    if not usable_path(path):
        print(f"warm runner: socket path too long for AF_UNIX ({len(str(path))} bytes): {path}", file=sys.stderr)
        return 2

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    preload([m for m in args.preload.split(",") if m], log=log)
    request = serve(path, log)
    if request is None:
        return 0
    return run_request(request)


if __name__ == "__main__":
    sys.exit(main())
