"""`rtrl chaos` stopped with SIGTERM tears its loop down (the run's `finally`) and exits 130."""

import os
import signal
import threading
from types import SimpleNamespace

from infra.chaos import runner
from infra.commands import chaos as command
from tests.conftest import make_config


def test_sigterm_runs_the_teardown_and_exits_130(tmp_path, monkeypatch, capsys):
    torn_down = []

    class SlowRun:
        def __init__(self, *args, **kwargs):
            pass

        def run(self):
            try:
                threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
                threading.Event().wait(30)       # a long run; SIGTERM arrives meanwhile
                return {}
            finally:
                torn_down.append(True)

    monkeypatch.setattr(runner, "ChaosRun", SlowRun)
    args = SimpleNamespace(types="", faults=2, state_dir=str(tmp_path / "chaos"), seed=0, users=2, speed=60.0,
                           lateness=60.0, warmup=1.0, cycle_every=4, keep_running=False, serving_cores=None,
                           config=None, overrides=[], json=True)
    before = signal.getsignal(signal.SIGTERM)
    assert command.main(args, make_config(tmp_path)) == 130
    assert torn_down == [True] and "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before
