"""Process control for a chaos run: kill a service of the loop and bring it back, kill a job mid-run and run it
again. Every process is one this run started from its own state dir (pid files under `<state>/run`); nothing
else on the machine is touched.

    ctl = Control(stack, cli, log)
    ctl.kill("serving"); ctl.restart("serving")          # SIGKILL the process group; `rtrl serve --detach`
    killed, seconds = ctl.kill_job(["rewards", "--cycle", "c3"], after_s=4.2)
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable

from infra.orchestrator.rtrl_cli import REPO, RtrlCli
from infra.stack.process import ManagedProcess

# service -> the `rtrl` command that starts it in the background and returns once it is healthy
DETACHED = {"archiver": ("archive", "--detach"), "collector": ("collector", "--detach"),
            "serving": ("serve", "--detach")}


class Control:
    def __init__(self, stack, cli: RtrlCli, log: Callable[[str], None] = print):
        self.stack, self.cli, self.log = stack, cli, log

    def proc(self, name: str) -> ManagedProcess:
        if name == "broker":
            return self.stack.broker.proc
        return ManagedProcess(name, self.stack.cfg.state_path)

    def running(self, name: str) -> bool:
        return self.proc(name).is_running()

    def kill(self, name: str) -> None:
        """SIGKILL the service's whole process group (vLLM's workers included) and wait until it is gone."""
        self.proc(name).kill()
        self.proc(name).pidfile.unlink(missing_ok=True)

    def start(self, name: str) -> None:
        """Start the service and return once it answers (broker: Kafka metadata; the others: their own health
        wait in `rtrl ... --detach`)."""
        if name == "broker":
            self.stack.broker.start()
        else:
            self.cli.run(*DETACHED[name], step=name, expect_json=False)

    def kill_job(self, args: list[str], after_s: float, step: str) -> tuple[bool, float]:
        """Run `rtrl ARGS` and SIGKILL it `after_s` seconds in. Returns (whether it was still running and was
        killed, its seconds). A job that finished first was not killed (the fault did not happen)."""
        self.cli.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cli.log_dir / f"{step}.log", "a", encoding="utf-8") as log:
            log.write(f"$ rtrl {' '.join(args)}   (to be killed after {after_s:.1f}s)\n")
            log.flush()
            proc = subprocess.Popen(self.cli.argv(*args), stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                    env={**os.environ, **self.cli.env}, start_new_session=True)
            t0 = time.monotonic()
            try:
                proc.wait(timeout=after_s)
                return False, time.monotonic() - t0
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                log.write(f"--- killed (SIGKILL) after {time.monotonic() - t0:.1f}s\n")
                return True, time.monotonic() - t0
