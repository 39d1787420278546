import pytest
"""`ManagedProcess.renice`: a background process of the stack yields the CPU, every thread of it, children too."""

import sys
from pathlib import Path

from infra.stack.process import ManagedProcess
from tests.waiting import wait_for

# a leader with two threads and a child process (with a thread of its own), reporting when all of them run
FAMILY = ("import subprocess, sys, threading, time\n"
          "child = subprocess.Popen([sys.executable, '-c', 'import threading, time\\n"
          "threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\\n"
          "print(\"child\", flush=True)\\ntime.sleep(120)'], stdout=subprocess.PIPE)\n"
          "child.stdout.readline()   # the child's thread runs\n"
          "for _ in range(2):\n"
          "    threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
          "print('ready', child.pid, flush=True)\n"
          "time.sleep(120)\n")


def _nice_values(pid: int) -> list[int]:
    """The nice value of each thread of `pid` (field 19 of /proc/PID/task/TID/stat)."""
    return [int((t / "stat").read_text().rsplit(")", 1)[1].split()[16]) for t in Path(f"/proc/{pid}/task").iterdir()]


def _ready(proc: ManagedProcess) -> int:
    """The child's pid, once the leader reports that all of the family runs."""
    line = wait_for(lambda: next((ln for ln in proc.logfile.read_text().splitlines() if ln.startswith("ready ")), None),
                    30, lambda: f"the process started; its log:\n{proc.log_tail()}", interval_s=0.05)
    return int(line.split()[1])


@pytest.mark.integration
def test_renice_lowers_every_thread_of_the_group_its_children_included(tmp_path):
    proc = ManagedProcess("family", tmp_path)
    rec = proc.start([sys.executable, "-c", FAMILY])
    try:
        child = _ready(proc)
        assert set(_nice_values(rec["pid"])) == {0}
        assert proc.renice(7) is True
        leader, kid = _nice_values(rec["pid"]), _nice_values(child)
        assert len(leader) == 3 and len(kid) == 2  # the leader's main thread and 2 more; the child's and 1 more
        assert set(leader) == {7} and set(kid) == {7}, (leader, kid)
        group = Path(f"/proc/{rec['pid']}/autogroup")
        if group.exists():     # the session's scheduling group, where the kernel has them
            assert group.read_text().split()[-1] == "7"
    finally:
        proc.stop(timeout_s=5)


def test_renice_of_a_process_that_is_not_running_says_so(tmp_path):
    assert ManagedProcess("absent", tmp_path).renice(5) is False
