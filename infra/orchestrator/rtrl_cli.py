"""Running `rtrl` subcommands as processes of their own, with the orchestrator's config file and overrides, stderr
to a log file, the JSON summary from the last stdout line: what the demo starts beside the cycle (the archiver,
the users, the UIs) and the replay jobs. The cycle's steps are library functions (infra.orchestrator.steps): they
run in the executor's process and read no command's stdout.

    cli = RtrlCli(config_path, overrides, log_dir)
    code, out = cli.run("replay", "--events", ..., step="replay")   # -> {"replay": {...}}, exit 0
    cli.run("archive", "--detach", step="archive", expect_json=False)
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from infra.argv import rtrl_args, rtrl_argv
from infra.orchestrator.errors import StepFailed  # noqa: F401 -- raised here, imported from here by callers

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RtrlCli:
    config: str | None
    overrides: list[str] = field(default_factory=list)
    log_dir: Path = Path(".")
    timeout_s: float = 3600.0
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        return rtrl_argv(*args, config=self.config, overrides=self.overrides)

    def cli_args(self, *args: str) -> list[str]:
        """`rtrl`'s own arguments: the config file, the overrides, then `args`."""
        return rtrl_args(*args, config=self.config, overrides=self.overrides)

    def run(self, *args: str, step: str, ok_codes: tuple[int, ...] = (0,), expect_json: bool = True,
            echo: Callable[[str], None] | None = None) -> tuple[int, dict]:
        """(exit code, the JSON object of the last stdout line, {} when not `expect_json`). StepFailed for any
        other exit code. `echo` also gets every stderr line as it comes (progress of long commands)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.log_dir / f"{step}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(log_file, "a", encoding="utf-8") as err:
            err.write(f"$ rtrl {' '.join(args)}\n")
            err.flush()
            proc = self._start(args, env)
            # one reader per pipe: `communicate()` would also read stderr, racing the pump for its lines
            pump = threading.Thread(target=_pump, args=(proc.stderr, err, echo), daemon=True)
            out: list[str] = []
            reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
            pump.start()
            reader.start()
            try:
                proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise StepFailed(f"`rtrl {' '.join(args)}` ran past {self.timeout_s:.0f}s (log: {log_file})") from None
            except BaseException:          # interrupted: the step's command must not outlive its runner
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
            finally:
                pump.join(timeout=10)
                reader.join(timeout=10)
        stdout = "".join(out)
        lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
        if proc.returncode not in ok_codes:
            tail = log_file.read_text(encoding="utf-8", errors="replace")[-1500:]
            raise StepFailed(f"`rtrl {' '.join(args)}` exited {proc.returncode} (log: {log_file}):\n{tail}",
                             proc.returncode)
        if not expect_json:
            return proc.returncode, {}
        try:
            return proc.returncode, _last_json(stdout)
        except ValueError:
            raise StepFailed(f"`rtrl {' '.join(args)}` printed no JSON summary (log: {log_file}); "
                             f"stdout ended: {lines[-3:] if lines else 'nothing'}") from None

    def _start(self, args: tuple[str, ...], env: dict[str, str]):
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=REPO, env=env, errors="replace")


def _pump(stream, sink, echo) -> None:
    for line in stream:
        sink.write(line)
        sink.flush()
        if echo is not None:
            echo(line.rstrip("\n"))


def _last_json(stdout: str) -> dict:
    """The summary: the last stdout line that is a JSON object, or the whole of stdout (indented JSON)."""
    text = stdout.strip()
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON")
    return json.loads(text[start:])
