"""Run one command inside bubblewrap: the only way eval code touches a model's work (docs/gate.md).

Containment, per call:
    network      none (a fresh network namespace with only a down loopback)
    filesystem   the host root read-only; the work dir read-write at `WORK_MOUNT`; a private, size-capped tmpfs
                 on /tmp; `hide` paths (e.g. the task suite with its hidden tests) covered by empty tmpfs
    processes    a fresh pid namespace: killing bubblewrap kills every process the command started
    rlimits      CPU seconds, address space, file size and process count, set by `prlimit` right before exec
    wall clock   past `wall_seconds` the sandbox is killed (SIGKILL to bwrap; --die-with-parent tears the pid
                 namespace down, so no grandchild survives)

Why the sandboxed program runs as an unprivileged uid. RLIMIT_NPROC is counted per *kernel* uid and never
enforced for root (`copy_process` skips the check for INIT_USER), and bwrap's --unshare-user maps the sandbox uid
back onto the caller's uid, so a root caller's fork bomb would be unlimited. Two modes:
  * caller is root (these machines, CI): bwrap keeps only CAP_SETUID/CAP_SETGID, and `setpriv` drops to a uid of
    its own (`_UidSlots`: unique among live sandboxes of all processes on the host, so one sandbox's fork bomb
    cannot eat another's process budget) with no capabilities and no_new_privs. The work dir is chowned to that
    uid; interpreter directories under non-traversable parents (pyenv under /root, mode 700) are re-exposed by
    a tmpfs over the parent plus a read-only bind, so `python` works for the unprivileged uid.
  * caller is not root: bwrap creates a user namespace; RLIMIT_NPROC is then counted per (namespace, uid), i.e.
    per sandbox, and enforced because the caller's uid is not root.

Infrastructure failures (bwrap missing, failing to set up, the wrapper failing) are reported in `infra_error`,
separately from the sandboxed program failing: the gate excludes the former and blames the model for the latter.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

BWRAP = "/usr/bin/bwrap"
WORK_MOUNT = "/tmp/workspace"   # where the work dir appears inside (under the private /tmp: the root is read-only)
_UID_BASE = 1_500_000_000       # far from any real account; + pid * 64 + slot stays below 2**31
_SLOTS_PER_PROCESS = 64


@dataclass(frozen=True)
class Limits:
    """Per-sandbox resource limits (per process for CPU, memory and file size; per sandbox for processes)."""
    cpu_seconds: int = 20
    memory_mb: int = 1024          # RLIMIT_AS (address space) of each process
    file_size_mb: int = 16         # RLIMIT_FSIZE: the largest file a process may write
    processes: int = 64            # RLIMIT_NPROC: processes and threads of the sandbox's uid
    wall_seconds: float = 30.0
    output_bytes: int = 64 * 1024  # stdout and stderr are each truncated to this
    tmp_mb: int = 64               # size of the private /tmp tmpfs (it lives in host memory)


@dataclass
class SandboxResult:
    returncode: int | None         # the program's exit status (128 + N when killed by signal N); None if never run
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    limit_hit: str | None = None   # "wall_clock" | "cpu" | "memory" | "file_size" | "processes" when identifiable
    infra_error: str | None = None # the sandbox itself failed (not the program): exclude, don't blame the model
    truncated: bool = False        # stdout or stderr was cut at Limits.output_bytes

    @property
    def ok(self) -> bool:
        return self.infra_error is None and self.returncode == 0 and not self.timed_out


class _UidSlots:
    """Unprivileged uids for root-mode sandboxes: `_UID_BASE + pid * 64 + slot`, unique across live processes
    (pids are unique, pid_max <= 2**22) and across the threads of one process (a slot is held for the call). A
    process's sandboxes die with it (--die-with-parent), so a reused pid never meets leftover processes."""

    def __init__(self) -> None:
        self._free = list(range(_SLOTS_PER_PROCESS))
        self._cond = threading.Condition()
        self._pid = os.getpid()

    def acquire(self) -> int:
        with self._cond:
            if self._pid != os.getpid():   # forked: the child's uids derive from its own pid
                self._free, self._pid = list(range(_SLOTS_PER_PROCESS)), os.getpid()
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def release(self, slot: int) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify()

    def uid(self, slot: int) -> int:
        return _UID_BASE + self._pid * _SLOTS_PER_PROCESS + slot


_slots = _UidSlots()


def interpreter_paths() -> tuple[str, ...]:
    """Directories the sandboxed `python` needs: the venv and the base installation it links to."""
    paths = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix),
             os.path.dirname(os.path.realpath(sys.executable))}
    return tuple(sorted(paths))


def _reexpose(paths: Sequence[str]) -> list[str]:
    """bwrap args making `paths` reachable by any uid: a 0755 tmpfs over the highest non-traversable ancestor
    (which also hides its other contents, e.g. the rest of /root), 0755 directories down to each path (bwrap
    would create them 0700), then a read-only bind of the path."""
    paths = sorted(set(paths))
    paths = [p for p in paths if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in paths)]
    args: list[str] = []
    made: set[str] = set()
    for p in paths:
        parts = Path(p).parts
        for i in range(1, len(parts)):
            anc = str(Path(*parts[:i]))
            try:
                mode = os.stat(anc).st_mode
            except OSError:
                break
            if not mode & stat.S_IXOTH:
                if anc not in made:
                    args += ["--perms", "0755", "--tmpfs", anc]
                    made.add(anc)
                for j in range(i + 1, len(parts)):
                    d = str(Path(*parts[:j]))
                    if d not in made:
                        args += ["--perms", "0755", "--dir", d]
                        made.add(d)
                args += ["--ro-bind", p, p]
                break
    return args


def _rebind_under(root: str, paths: Sequence[str]) -> list[str]:
    """bwrap args that make `paths` under `root` visible again after a tmpfs replaced `root` (a checkout and
    its .venv under /tmp, e.g. a CI clone in a mktemp dir): 0755 directories down to each, then a read-only bind."""
    args: list[str] = []
    made: set[str] = set()
    for p in sorted(set(paths)):
        if not p.startswith(root.rstrip("/") + "/"):
            continue
        parts = Path(p).relative_to(root).parts
        for j in range(1, len(parts)):
            d = str(Path(root, *parts[:j]))
            if d not in made:
                args += ["--perms", "0755", "--dir", d]
                made.add(d)
        args += ["--ro-bind", p, p]
    return args


def _chown_tree(root: str, uid: int) -> None:
    """Give the sandbox uid the work dir (root mode). Files written inside come back owned by it; root can still
    read and delete them."""
    os.lchown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


def _env(extra: dict[str, str] | None) -> list[str]:
    env = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
           "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **(extra or {})}
    out = ["--clearenv"]
    for k, v in env.items():
        out += ["--setenv", k, v]
    return out


def _hide(paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            out += ["--tmpfs", os.path.realpath(p)]
        elif os.path.exists(p):
            out += ["--ro-bind", "/dev/null", os.path.realpath(p)]
    return out


def _rlimits(limits: Limits) -> list[str]:
    mb = 1024 * 1024
    return ["/usr/bin/prlimit", f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
            f"--as={limits.memory_mb * mb}", f"--fsize={limits.file_size_mb * mb}",
            f"--nproc={limits.processes}", "--"]


def build_argv(argv: Sequence[str], workdir: str, limits: Limits, started_fd: int, uid: int | None,
               hide: Sequence[str] = (), env: dict[str, str] | None = None) -> list[str]:
    """The full bwrap command line (root mode when `uid` is given, user-namespace mode otherwise)."""
    ns = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if uid is None:
        ns = ["--unshare-all"]   # includes the user namespace that makes RLIMIT_NPROC per sandbox
    cmd = [BWRAP, *ns, "--die-with-parent", "--new-session", "--ro-bind", "/", "/"]
    if uid is not None:
        cmd += _reexpose(interpreter_paths())
    cmd += _hide(hide)
    cmd += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--size", str(limits.tmp_mb * 1024 * 1024),
            "--tmpfs", "/tmp", *_rebind_under("/tmp", interpreter_paths()),
            "--bind", os.path.realpath(workdir), WORK_MOUNT, "--chdir", WORK_MOUNT, *_env(env)]
    if uid is not None:
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        cmd += ["--"]
    # The last wrapper reports on `started_fd` (and closes it) right before exec'ing the program: a sandbox that
    # never reports failed to set up (infrastructure); anything after that is the program's doing. bash, not sh:
    # dash rejects fd numbers above 9.
    started = ["/bin/bash", "-c", f'printf 1 >&{started_fd}; exec {started_fd}>&-; exec "$@"', "bash"]
    return cmd + _rlimits(limits) + started + list(argv)


class _Capture(threading.Thread):
    """Drains a pipe, keeping the first `cap` bytes (a program printing forever costs no host memory)."""

    def __init__(self, stream, cap: int) -> None:
        super().__init__(daemon=True)
        self.stream, self.cap, self.buf, self.total = stream, cap, bytearray(), 0
        self.start()

    def run(self) -> None:
        while chunk := self.stream.read1(65536):
            self.total += len(chunk)
            if len(self.buf) < self.cap:
                self.buf += chunk[:self.cap - len(self.buf)]
        self.stream.close()

    def text(self) -> str:
        return self.buf.decode("utf-8", errors="replace")


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
    except (BrokenPipeError, OSError):
        pass   # the program exited without reading all of its input: its business
    finally:
        try:
            stream.close()
        except OSError:
            pass


_SIGNAL_LIMITS = {128 + signal.SIGXCPU: "cpu", 128 + signal.SIGXFSZ: "file_size"}
_TEXT_LIMITS = (("MemoryError", "memory"), ("Cannot allocate memory", "memory"), ("File too large", "file_size"),
                ("Resource temporarily unavailable", "processes"), ("Cannot fork", "processes"),
                ("can't fork", "processes"))


def classify_limit(returncode: int | None, stderr: str, timed_out: bool) -> str | None:
    """Which limit ended the program, when its exit status or its error text says so (a heuristic: the verdict
    is the exit status; this is a diagnosis for reports)."""
    if timed_out:
        return "wall_clock"
    if returncode in _SIGNAL_LIMITS:
        return _SIGNAL_LIMITS[returncode]
    if returncode not in (0, None):
        for needle, what in _TEXT_LIMITS:
            if needle in stderr:
                return what
    return None


def _read_started(fd: int) -> bool:
    """Whether the wrapper reported the start (it did so before exec, so the byte is there if ever written)."""
    with os.fdopen(fd, "rb") as f:
        ready, _, _ = select.select([f], [], [], 5.0)
        return bool(ready) and f.read(1) == b"1"


def run_sandboxed(argv: Sequence[str], workdir: str | os.PathLike, limits: Limits = Limits(),
                  stdin: bytes | str | None = None, hide: Sequence[str] = (),
                  env: dict[str, str] | None = None) -> SandboxResult:
    """Run `argv` in a fresh sandbox with `workdir` writable at `WORK_MOUNT` (also the working directory).
    Thread-safe: every call has its own namespaces, tmpfs, pipes and (root mode) uid."""
    workdir = os.fspath(workdir)
    for tool in (BWRAP, "/usr/bin/prlimit") + (("/usr/bin/setpriv",) if os.geteuid() == 0 else ()):
        if not os.access(tool, os.X_OK):
            return SandboxResult(None, "", "", 0.0, infra_error=f"{tool} not found or not executable")
    if not os.path.isdir(workdir):
        return SandboxResult(None, "", "", 0.0, infra_error=f"work dir {workdir} does not exist")
    slot = _slots.acquire() if os.geteuid() == 0 else None
    try:
        uid = None if slot is None else _slots.uid(slot)
        if uid is not None:
            _chown_tree(workdir, uid)
        return _run(argv, workdir, limits, stdin, uid, hide, env)
    finally:
        if slot is not None:
            _slots.release(slot)


def _run(argv, workdir, limits, stdin, uid, hide, env) -> SandboxResult:
    rfd, wfd = os.pipe()
    cmd = build_argv(argv, workdir, limits, wfd, uid, hide, env)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(wfd,),
                                start_new_session=True)
    except OSError as e:
        os.close(rfd)
        os.close(wfd)
        return SandboxResult(None, "", "", time.monotonic() - t0, infra_error=f"cannot start bwrap: {e}")
    os.close(wfd)
    out, err = _Capture(proc.stdout, limits.output_bytes), _Capture(proc.stderr, limits.output_bytes)
    if stdin is not None:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()   # bwrap dies; --die-with-parent kills the pid namespace's init, and with it every process
        proc.wait()
    seconds = time.monotonic() - t0
    out.join(5.0)
    err.join(5.0)
    started = _read_started(rfd)
    stderr = err.text()
    result = SandboxResult(None if timed_out else proc.returncode, out.text(), stderr, seconds, timed_out,
                           truncated=max(out.total, err.total) > limits.output_bytes)
    if not started:
        result.returncode = None
        result.infra_error = (f"the sandbox did not start (bwrap exit {proc.returncode}"
                              f"{', killed at the wall clock' if timed_out else ''}): {stderr.strip()[:500]}")
    else:
        result.limit_hit = classify_limit(result.returncode, stderr, timed_out)
    return result


def sandbox_overhead_ms(n: int = 20, argv: Sequence[str] = ("/bin/true",)) -> dict[str, float]:
    """Median wall ms of `argv` in a fresh sandbox vs as a plain subprocess (the benchmark's sandbox_overhead_ms
    is the difference). Uses a throwaway work dir."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rtrl-overhead-") as tmp:
        run_sandboxed(argv, tmp)   # warm the page cache
        boxed, plain = [], []
        for _ in range(n):
            t = time.perf_counter()
            r = run_sandboxed(argv, tmp)
            boxed.append((time.perf_counter() - t) * 1000)
            if r.infra_error:
                raise RuntimeError(r.infra_error)
            t = time.perf_counter()
            subprocess.run(list(argv), cwd=tmp, stdin=subprocess.DEVNULL, capture_output=True, check=False)
            plain.append((time.perf_counter() - t) * 1000)
    b, p = statistics.median(boxed), statistics.median(plain)
    return {"sandbox_ms": round(b, 2), "plain_ms": round(p, 2), "sandbox_overhead_ms": round(b - p, 2), "n": n}
