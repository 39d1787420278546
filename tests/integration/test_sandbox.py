"""Containment of `evals.sandbox` with the real bubblewrap: what a task's code may try (network, writing outside its
work dir, a fork bomb, an infinite loop, a memory hog, a huge file) is stopped, reported, and harms neither the
host nor a sandbox running beside it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import shutil

from evals import sandbox
from evals.sandbox import Limits, run_sandboxed, sandbox_overhead_ms
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not os.access(sandbox.BWRAP, os.X_OK), reason="bubblewrap is not installed")]

FORK_BOMB = ("import os, time\nwhile True:\n    try:\n        os.fork()\n"
             "    except OSError:\n        open('at-limit', 'w').close()\n        time.sleep(0.001)\n")


_cleanup: list[Path] = []


def request_cleanup(path: Path) -> None:
    _cleanup.append(path)


@pytest.fixture(autouse=True)
def _remove_requested():
    yield
    while _cleanup:
        shutil.rmtree(_cleanup.pop(), ignore_errors=True)


def _processes_of_sandbox_uids() -> list[int]:
    """Host pids running under a sandbox uid (root mode) — there must be none once a sandbox returned."""
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if os.stat(f"/proc/{p}").st_uid >= sandbox._UID_BASE:
                    pids.append(int(p))
            except FileNotFoundError:
                pass
    return pids


def _pids_with_marker(marker: str) -> list[int]:
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if marker in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(p))
            except OSError:
                pass
    return found


def test_program_runs_in_the_work_dir_and_its_exit_status_is_reported(tmp_path):
    (tmp_path / "a.py").write_text("import sys; print(open('a.py').read()[:6]); sys.exit(3)\n")
    r = run_sandboxed(["python", "a.py"], tmp_path)
    assert (r.returncode, r.infra_error, r.timed_out, r.limit_hit) == (3, None, False, None)
    assert r.stdout == "import\n"


def test_stdin_reaches_the_program(tmp_path):
    r = run_sandboxed(["python", "-c", "import sys; print(sys.stdin.read().upper())"], tmp_path, stdin="abc")
    assert r.returncode == 0 and r.stdout.strip() == "ABC"


def test_network_is_unreachable_even_to_a_host_loopback_server(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    client = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
    try:
        plain = subprocess.run([sys.executable, "-c", client], capture_output=True, text=True, timeout=10)
        assert plain.stdout.strip() == "connected"            # the probe works outside the sandbox
        server.accept()[0].close()
        r = run_sandboxed(["python", "-c", client], tmp_path)
        assert r.returncode != 0 and "connected" not in r.stdout
        assert "Connection refused" in r.stderr or "unreachable" in r.stderr
        with pytest.raises(TimeoutError):
            server.accept()                                    # nothing came through
    finally:
        server.close()


def test_writes_outside_the_work_dir_do_not_reach_the_host(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside.txt"
    work.mkdir()
    outside.write_text("original")
    script = (f"import os\n"
              f"for p in [{str(outside)!r}, '/etc/rtrl-sandbox-probe', '/usr/rtrl-probe']:\n"
              f"    try:\n        open(p, 'w').write('pwned')\n    except OSError as e:\n        print('denied', p)\n"
              f"open('/tmp/rtrl-private-probe', 'w').write('x')\n"
              f"open('inside.txt', 'w').write('ok')\n")
    r = run_sandboxed(["python", "-c", script], work)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("denied") == 3
    assert outside.read_text() == "original"
    assert not Path("/etc/rtrl-sandbox-probe").exists() and not Path("/usr/rtrl-probe").exists()
    assert not Path("/tmp/rtrl-private-probe").exists()        # /tmp inside is private
    assert (work / "inside.txt").read_text() == "ok"           # the work dir is writable


def test_hidden_paths_are_empty_inside(tmp_path):
    secret = Path(tempfile.mkdtemp(prefix="rtrl-suite-", dir="/var/tmp"))   # outside /tmp, which is private anyway
    request_cleanup(secret)
    secret.chmod(0o755)
    (secret / "tests").mkdir(parents=True)
    (secret / "tests" / "test_hidden.py").write_text("SECRET = 1\n")
    work = tmp_path / "work"
    work.mkdir()
    probe = f"import os; print(os.listdir({str(secret)!r}))"
    assert "tests" in run_sandboxed(["python", "-c", probe], work).stdout
    assert run_sandboxed(["python", "-c", probe], work, hide=[str(secret)]).stdout.strip() == "[]"


def test_infinite_loop_is_stopped_by_the_cpu_limit(tmp_path):
    r = run_sandboxed(["python", "-c", "while True: pass"], tmp_path, Limits(cpu_seconds=1, wall_seconds=20))
    assert r.limit_hit == "cpu" and not r.timed_out and r.returncode != 0
    assert r.seconds >= 1  # it ran for its whole CPU second (a single thread: CPU time <= wall time)


def test_wall_clock_kill_takes_the_whole_process_tree(tmp_path):
    marker = "98765.4321"
    r = run_sandboxed(["sh", "-c", f"sleep {marker} & sleep {marker} & (sleep {marker}) ; wait"], tmp_path,
                      Limits(wall_seconds=1))
    assert r.timed_out and r.limit_hit == "wall_clock" and r.returncode is None
    assert r.seconds >= 1  # killed at the wall clock, not before
    # the kernel tears the pid namespace down once bwrap is killed: every process of the tree goes with it
    wait_for(lambda: _pids_with_marker(marker) == [], 10, "the sandbox's process tree gone", interval_s=0.05)


def test_memory_hog_gets_memory_error_and_host_is_unaffected(tmp_path):
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))\n"
    r = run_sandboxed(["python", "-c", hog], tmp_path, Limits(memory_mb=256, wall_seconds=20))
    assert r.limit_hit == "memory" and r.returncode != 0 and "MemoryError" in r.stderr
    big = run_sandboxed(["python", "-c", "x = bytearray(2**33)"], tmp_path, Limits(memory_mb=256))
    assert big.limit_hit == "memory"


def test_file_size_limit_caps_files_written_in_the_work_dir(tmp_path):
    r = run_sandboxed(["python", "-c", "open('big', 'wb').write(b'x' * (8 * 2**20))"], tmp_path,
                      Limits(file_size_mb=1))
    assert r.limit_hit == "file_size" and r.returncode != 0
    assert (tmp_path / "big").stat().st_size <= 2**20


def test_private_tmp_is_size_capped(tmp_path):
    r = run_sandboxed(["sh", "-c", "head -c 20000000 /dev/zero > /tmp/fill"], tmp_path,
                      Limits(tmp_mb=4, file_size_mb=64))
    assert r.returncode != 0 and "No space left" in r.stderr


def test_output_is_truncated_at_the_cap(tmp_path):
    r = run_sandboxed(["python", "-c", "print('y' * 10_000_000)"], tmp_path, Limits(output_bytes=1000))
    assert r.returncode == 0 and r.truncated and len(r.stdout) == 1000


def test_fork_bomb_is_contained_and_a_concurrent_sandbox_still_succeeds(tmp_path):
    bomb_dir, good_dir = tmp_path / "bomb", tmp_path / "good"
    bomb_dir.mkdir()
    good_dir.mkdir()
    results = {}
    bomber = threading.Thread(target=lambda: results.update(bomb=run_sandboxed(
        ["python", "-c", FORK_BOMB], bomb_dir, Limits(processes=32, wall_seconds=4))))
    bomber.start()
    # the bomb's processes write `at-limit` in its work dir once a fork fails
    wait_for(lambda: (bomb_dir / "at-limit").exists(), 4, "the fork bomb at its process limit", interval_s=0.02)
    good = run_sandboxed(["python", "-c", "import subprocess; print(subprocess.run(['echo', 'fine'], "
                          "capture_output=True, text=True).stdout.strip())"], good_dir, Limits(processes=32))
    host = subprocess.run(["true"])                          # the host can still fork
    bomber.join()
    bomb = results["bomb"]
    assert good.returncode == 0 and good.stdout.strip() == "fine", good.stderr
    assert host.returncode == 0
    assert bomb.timed_out and bomb.limit_hit == "wall_clock"
    wait_for(lambda: _processes_of_sandbox_uids() == [], 10, "every bomb process dead with its sandbox",
             interval_s=0.05)


def test_process_limit_is_enforced_for_a_root_caller(tmp_path):
    counter = ("import os\nn = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n"
               "    except OSError:\n        break\n    if pid == 0:\n        import time; time.sleep(1); os._exit(0)\n"
               "    n += 1\nprint(n, os.getuid())\n")
    r = run_sandboxed(["python", "-c", counter], tmp_path, Limits(processes=10))
    forked, uid = map(int, r.stdout.split())
    assert 0 < forked < 10  # it could fork, up to the limit of 10 processes (itself included)
    assert uid != 0


def test_many_concurrent_sandboxes_keep_their_files_apart(tmp_path):
    dirs = [tmp_path / f"w{i}" for i in range(8)]
    out: dict[int, object] = {}

    def one(i: int) -> None:
        dirs[i].mkdir()
        out[i] = run_sandboxed(["sh", "-c", f"echo {i} > /tmp/me && sleep 0.2 && cat /tmp/me > mine && cat mine"],
                               dirs[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        assert out[i].returncode == 0 and out[i].stdout.strip() == str(i)
        assert (dirs[i] / "mine").read_text().strip() == str(i)


def test_missing_bubblewrap_is_an_infrastructure_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "no-bwrap"))
    r = run_sandboxed(["true"], tmp_path)
    assert r.infra_error and "no-bwrap" in r.infra_error and r.returncode is None


def test_bubblewrap_setup_failure_is_an_infrastructure_error_not_a_program_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "WORK_MOUNT", "/proc/sys/rtrl-cannot-exist/work")
    r = run_sandboxed(["true"], tmp_path)
    assert r.infra_error and "did not start" in r.infra_error and r.returncode is None
    monkeypatch.undo()
    failing = run_sandboxed(["sh", "-c", "echo bwrap: fake >&2; exit 1"], tmp_path)
    assert failing.infra_error is None and failing.returncode == 1


def test_overhead_measurement_reports_both_medians():
    m = sandbox_overhead_ms(3)
    assert m["sandbox_ms"] > 0 and m["plain_ms"] > 0 and m["n"] == 3
    assert m["sandbox_overhead_ms"] == pytest.approx(m["sandbox_ms"] - m["plain_ms"], abs=0.02)
