"""A hand-written task folder, as a user would supply one, for the loader, grading and flaky-check tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evals import sandbox

TOML = """id = "user-1"
category = "bugfix"
cluster = "acme"
focus_file = "calc.py"
fail_to_pass = ["tests/test_calc.py::test_add_adds"]
pass_to_pass = ["tests/test_calc.py::test_sub_subtracts", "tests/test_calc.py::CalcCase::test_mul"]
"""
TESTS = """import unittest

import calc


def test_add_adds():
    assert calc.add(2, 3) == 5


def test_sub_subtracts():
    assert calc.sub(5, 3) == 2


class CalcCase(unittest.TestCase):
    def test_mul(self):
        self.assertEqual(calc.mul(2, 3), 6)
"""
CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"


def write_task(root: Path, name: str = "user-1", toml: str = TOML, tests: str = TESTS, calc: str = CALC,
               solution: bool = True) -> Path:
    d = root / name
    (d / "repo").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "repo" / "calc.py").write_text(calc)
    (d / "tests" / "test_calc.py").write_text(tests)
    (d / "prompt.md").write_text("add is broken\n")
    (d / "task.toml").write_text(toml)
    if solution:
        (d / "solution").mkdir()
        (d / "solution" / "calc.py").write_text(calc.replace("return a - b", "return a + b", 1))
    return d


needs_bwrap = pytest.mark.skipif(not os.access(sandbox.BWRAP, os.X_OK), reason="bubblewrap is not installed")
