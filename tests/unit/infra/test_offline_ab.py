"""`rtrl offline-ab` argument checks (the comparison itself: tests/integration/test_offline_ab.py)."""

import subprocess
from pathlib import Path

import pytest

from infra.argv import rtrl_argv

REPO = Path(__file__).parents[3]


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(rtrl_argv("offline-ab", *args, overrides=[f'state_dir="{tmp_path}"']),
                          capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.integration
def test_offline_ab_rejects_a_folder_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "empty").mkdir()
    out = _run(str(tmp_path / "empty"), tmp_path=tmp_path)
    assert out.returncode == 1 and "not a Hugging Face checkpoint folder" in out.stderr and out.stdout == ""


@pytest.mark.integration
def test_offline_ab_rejects_a_reference_that_is_neither_folder_nor_version(tmp_path):
    out = _run(str(tmp_path / "missing"), tmp_path=tmp_path)
    assert out.returncode == 1 and "neither a checkpoint folder nor a registry version number" in out.stderr


@pytest.mark.integration
def test_offline_ab_rejects_nonpositive_hours_and_users(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    assert "--hours must be positive" in _run(str(tmp_path / "ckpt"), "--hours", "0", tmp_path=tmp_path).stderr
    out = _run(str(tmp_path / "ckpt"), "--users", "0", tmp_path=tmp_path)
    assert out.returncode == 1 and "--users" in out.stderr


@pytest.mark.integration
def test_offline_ab_rejects_fewer_than_one_job(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    out = _run(str(tmp_path / "ckpt"), "--jobs", "0", tmp_path=tmp_path)
    assert out.returncode == 1 and "--jobs must be at least 1" in out.stderr and out.stdout == ""
