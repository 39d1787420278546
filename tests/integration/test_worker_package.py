"""The package a distributed runner's workers install (docs/rewards.md, "Storage and runners"): `pip wheel .`
builds one wheel holding every module a reward job's workers import, and nothing of the tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).parents[2]


def test_the_project_builds_as_one_wheel_with_every_module_the_reward_workers_import(tmp_path):
    # from a copy of the tracked tree: setuptools writes build/ and *.egg-info/ beside the sources it builds
    src = tmp_path / "src"
    src.mkdir()
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for rel in filter(None, tracked.decode().split("\0")):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(tmp_path)], check=True, timeout=300, cwd=tmp_path)
    [wheel] = tmp_path.glob("rtrl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = {p.relative_to(REPO).as_posix() for d in ("pipelines", "schemas") for p in (REPO / d).rglob("*.py")}
    assert needed <= names, sorted(needed - names)[:5]
    assert "pipelines/rewards/data/followups_labelled.jsonl" in names   # the follow-up classifier's data
    assert not any(n.startswith("tests/") for n in names)
