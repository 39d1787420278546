"""The warm step runner: commands forked from it behave like commands started as new interpreters (argv, env,
cwd, stdout/stderr, exit code, exit handlers), a command past its timeout or whose client went away is stopped,
and without a runner the client starts a new interpreter."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infra.orchestrator.rtrl_cli import RtrlCli, StepFailed
from infra.orchestrator.warm_process import WarmProcess, warm_spawner
from tests.waiting import wait_for

REPO = Path(__file__).parents[3]

# The runner's children run `infra.cli.main`; here it is replaced by a small command set (before the runner starts)
FAKE_CLI = textwrap.dedent("""
    import atexit, json, os, sys, threading, time
    import infra.cli

    def main(argv):
        cmd = argv[-1]
        if cmd == "echo":
            print("to stderr", file=sys.stderr)
            print(json.dumps({"argv": argv, "env": os.environ.get("WARM_TEST"), "cwd": os.getcwd(),
                              "pid": os.getpid(), "parent": os.getppid()}))
            return 3
        if cmd == "sleep":
            open(os.environ["WARM_PIDFILE"], "w").write(str(os.getpid()))
            time.sleep(60)  # a command that runs until it is stopped
            return 0
        if cmd == "exit-handlers":
            atexit.register(lambda: print("atexit ran", flush=True))
            # a thread still running when main returns: the interpreter's exit must wait for it
            t = threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True)))
            t.start()
            print(json.dumps({"started": True}))
            return 0
        if cmd == "crash":
            raise RuntimeError("boom")
        return 9

    infra.cli.main = main
    from infra.orchestrator import warm_runner
    sys.exit(warm_runner.main(["--socket", sys.argv[1], "--preload", ""]))
""")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    d = Path(f"/tmp/warm-{os.getpid()}")          # short: AF_UNIX paths are limited to ~107 bytes
    d.mkdir(exist_ok=True)
    sock = d / "steps.sock"
    log = open(tmp_path_factory.mktemp("warm") / "runner.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", FAKE_CLI, str(sock)], cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT)

    def listening() -> bool:
        assert proc.poll() is None, "the warm runner exited before it listened"
        return sock.exists()

    wait_for(listening, 120, "the warm runner listening", interval_s=0.1)
    yield sock, proc
    proc.terminate()
    proc.wait(timeout=30)
    log.close()
    assert not sock.exists(), "a stopped runner removes its socket"
    d.rmdir()


def cli(tmp_path, sock, timeout_s=60.0, **env):
    return RtrlCli(None, ["x=1"], tmp_path / "logs", timeout_s, env=env, spawn=warm_spawner(sock))


def test_a_warm_child_gets_the_commands_argv_env_cwd_stdio_and_exit_code(runner, tmp_path):
    sock, proc = runner
    code, out = cli(tmp_path, sock, WARM_TEST="seen").run("echo", step="echo", ok_codes=(3,))
    assert code == 3
    assert out["argv"] == ["--set", "x=1", "echo"] and out["env"] == "seen" and out["cwd"] == str(REPO)
    assert out["parent"] == proc.pid and out["pid"] != proc.pid, "a process of its own, forked by the runner"
    assert "to stderr" in (tmp_path / "logs" / "echo.log").read_text()


def test_a_warm_child_exits_like_an_interpreter_joining_threads_and_running_atexit(runner, tmp_path):
    sock, _ = runner
    c = cli(tmp_path, sock)
    proc = WarmProcess.start(sock, c.cli_args("exit-handlers"), dict(os.environ), REPO)
    assert proc is not None
    out = proc.stdout.read()
    assert proc.wait(30) == 0
    assert out.splitlines()[1:] == ["thread finished", "atexit ran"], out


def test_a_crashing_command_fails_its_step_and_the_runner_keeps_serving(runner, tmp_path):
    sock, proc = runner
    with pytest.raises(StepFailed, match="exited 1"):
        cli(tmp_path, sock).run("crash", step="crash")
    assert "RuntimeError: boom" in (tmp_path / "logs" / "crash.log").read_text()
    assert proc.poll() is None
    assert cli(tmp_path, sock).run("echo", step="echo", ok_codes=(3,))[0] == 3


def test_a_command_past_its_timeout_is_killed(runner, tmp_path):
    sock, _ = runner
    pidfile = tmp_path / "pid"
    with pytest.raises(StepFailed, match="ran past"):
        cli(tmp_path, sock, timeout_s=3, WARM_PIDFILE=str(pidfile)).run("sleep", step="sleep")
    _gone(int(pidfile.read_text()))


def test_a_client_that_goes_away_takes_its_command_with_it(runner, tmp_path):
    sock, _ = runner
    pidfile = tmp_path / "pid"
    proc = WarmProcess.start(sock, ["sleep"], {**os.environ, "WARM_PIDFILE": str(pidfile)}, REPO)
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), 30, "the command running (its pid file)",
             interval_s=0.05)
    proc.conn.shutdown(socket.SHUT_RDWR)
    proc.conn.close()
    _gone(proc.pid)


@pytest.mark.integration
def test_without_a_runner_the_command_starts_a_new_interpreter(tmp_path):
    missing = tmp_path / "no-runner.sock"
    c = RtrlCli(None, [f'state_dir="{tmp_path}"'], tmp_path / "logs", 120, spawn=warm_spawner(missing))
    code, out = c.run("config", step="config")
    assert code == 0 and out["state_dir"] == str(tmp_path)
    stale = tmp_path / "stale.sock"                # a socket file nobody listens at (a runner that died)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(stale))
    s.close()
    assert WarmProcess.start(stale, ["config"], dict(os.environ), REPO) is None


def _gone(pid: int, timeout_s: float = 30) -> None:
    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_for(gone, timeout_s, f"pid {pid} stopped", interval_s=0.05)
    except AssertionError:
        os.kill(pid, signal.SIGKILL)
        raise


@pytest.mark.parametrize("cpu_only", [True, False])
def test_deepspeed_is_preloaded_only_with_a_torch_built_without_cuda(monkeypatch, cpu_only):
    from infra.orchestrator import warm_runner

    imported: list[str] = []
    monkeypatch.setattr(warm_runner, "cpu_only_torch", lambda: cpu_only)
    monkeypatch.setattr(warm_runner.importlib, "import_module", imported.append)
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    warm_runner.preload(["torch"], log=lambda m: None)
    assert imported[0] == "torch" and any(n.startswith("infra.commands.") for n in imported)
    assert (set(warm_runner.CPU_PRELOAD) <= set(imported)) == cpu_only
    assert os.environ.get("DS_ACCELERATOR") == ("cpu" if cpu_only else None)
    imported.clear()
    warm_runner.preload([], log=lambda m: None)
    assert not set(warm_runner.CPU_PRELOAD) & set(imported), "no heavy preload when none is asked for"
