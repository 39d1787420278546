"""Fixtures of the eval tests (the helpers live in `task_folders`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.evals.task_folders import write_task


@pytest.fixture
def user_task_dir(tmp_path) -> Path:
    return write_task(tmp_path / "suite")
