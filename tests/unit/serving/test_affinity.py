"""Moving a running process's threads to other cores (serving/affinity.py), on real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from serving.affinity import descendants, parse_cores, pin_threads, thread_affinities
from tests.waiting import wait_for

THREADS = """
import subprocess, sys, threading, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # processes to move, idle
for _ in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print(child.pid, flush=True)
time.sleep(60)
"""


def test_core_lists_parse_like_vllms_bind_lists():
    assert parse_cores("0") == {0}
    assert parse_cores("0-3") == {0, 1, 2, 3}
    assert parse_cores("0,2,4-5") == {0, 2, 4, 5}
    assert parse_cores("0-1|2-3") == {0, 1, 2, 3}
    with pytest.raises(ValueError):
        parse_cores("3-1")


@pytest.mark.integration
def test_every_thread_of_a_process_and_its_children_moves_to_the_given_cores():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: every thread is on core 0 already")
    proc = subprocess.Popen([sys.executable, "-c", THREADS], stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        wait_for(lambda: len(thread_affinities(proc.pid)) == 4, 10, "the main thread and 3 sleepers", interval_s=0.05)
        assert descendants(proc.pid) == [child]
        assert thread_affinities(child)[child] == os.sched_getaffinity(0) != {0}
        moved = pin_threads([proc.pid, *descendants(proc.pid)], {0})
        assert moved == 5                                       # the main thread, 3 sleepers, the child
        for pid in (proc.pid, child):
            assert set(map(frozenset, thread_affinities(pid).values())) == {frozenset({0})}
    finally:
        for p in descendants(proc.pid):
            subprocess.run(["kill", str(p)], check=False)
        proc.kill()
        proc.wait()
