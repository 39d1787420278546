"""`rtrl serve` refuses to start with a clear message (unset alias, taken port), and its parsing stays light."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infra.argv import rtrl_argv
from tests.conftest import free_port

REPO = Path(__file__).parents[3]
HEAVY = ("torch", "vllm", "transformers", "mlflow", "starlette", "uvicorn", "kafka")


def rtrl(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(rtrl_argv(*args, overrides=[f'state_dir="{tmp_path}"']),
                          capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.slow  # a subprocess that imports MLflow (~8 s)
def test_serve_without_registered_policy_says_to_run_bootstrap(tmp_path):
    out = rtrl(tmp_path, "--set", f"serving.port={free_port()}", "serve")
    assert out.returncode == 1
    assert "registry alias 'control' (arm control), 'champion' (arm treatment)" in out.stderr
    assert "run `rtrl bootstrap`" in out.stderr


@pytest.mark.integration
def test_serve_on_a_taken_port_names_the_port_and_the_setting(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = rtrl(tmp_path, "--set", f"serving.port={port}", "serve", "--detach")
    assert out.returncode == 1
    assert f"port {port} on 127.0.0.1 is taken" in out.stderr and "--set serving.port=PORT" in out.stderr


@pytest.mark.integration
def test_serve_and_bench_serving_parse_without_heavy_imports():
    code = ("import sys; from infra.cli import _parser; "
            "a = _parser().parse_args(['serve', '--detach']); b = _parser().parse_args(['bench', 'serving', "
            "'--json', '--batch', '8']); assert a.detach and b.batch == 8; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
