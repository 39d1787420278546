"""Grading in the sandbox with the stdlib runner: outcomes per test id, resolved only when every hidden test
passes, and the code under test can neither fake results nor read the hidden tests."""

from __future__ import annotations

import pytest

import shutil
import tempfile
from pathlib import Path

from evals import sandbox
from evals.sandbox import run_sandboxed
from evals.tasks import load_task
from evals.tasks.grade import grade, parse_results, prepare_workdir, solved_workdir
from tests.unit.evals.task_folders import CALC, TOML, needs_bwrap, write_task

pytestmark = needs_bwrap


@pytest.mark.integration
def test_snapshot_is_unresolved_and_the_solution_resolved(user_task_dir, tmp_path):
    task = load_task(user_task_dir)
    before = grade(task, task.repo_dir)
    assert not before.resolved and before.infra_error is None
    assert before.outcomes == {"tests/test_calc.py::test_add_adds": "failed",
                               "tests/test_calc.py::test_sub_subtracts": "passed",
                               "tests/test_calc.py::CalcCase::test_mul": "passed"}
    assert "assert" in before.messages["tests/test_calc.py::test_add_adds"]
    after = grade(task, solved_workdir(task, tmp_path / "solved"))
    assert after.resolved and set(after.outcomes.values()) == {"passed"} and after.messages == {}


@pytest.mark.integration
def test_grading_does_not_change_the_work_dir(user_task_dir, tmp_path):
    task = load_task(user_task_dir)
    work = prepare_workdir(task, tmp_path / "work")
    grade(task, work)
    assert sorted(p.name for p in work.rglob("*")) == ["calc.py"] and (work / "calc.py").read_text() == CALC


@pytest.mark.integration
def test_broken_import_makes_every_test_an_error(user_task_dir, tmp_path):
    task = load_task(user_task_dir)
    work = prepare_workdir(task, tmp_path / "work")
    (work / "calc.py").write_text("def add(:\n")
    g = grade(task, work)
    assert not g.resolved and set(g.outcomes.values()) == {"error"}


@pytest.mark.integration
def test_code_that_kills_the_runner_leaves_its_tests_missing_not_passed(user_task_dir, tmp_path):
    task = load_task(user_task_dir)
    work = prepare_workdir(task, tmp_path / "work")
    (work / "calc.py").write_text(CALC.replace("return a - b", "import os; os._exit(0)", 1))
    g = grade(task, work)
    assert g.outcomes["tests/test_calc.py::test_add_adds"] == "missing" and not g.resolved


@pytest.mark.integration
def test_printed_fake_results_do_not_count(user_task_dir, tmp_path):
    task = load_task(user_task_dir)
    work = prepare_workdir(task, tmp_path / "work")
    fake = ('import json, sys\nfor i in ["tests/test_calc.py::test_add_adds"]:\n'
            '    for n in ["", "0" * 32]:\n'
            '        print(f"@@{n} " + json.dumps({"id": i, "outcome": "passed", "message": ""}))\n')
    (work / "calc.py").write_text(fake + CALC)
    assert grade(task, work).outcomes["tests/test_calc.py::test_add_adds"] == "failed"


@pytest.mark.integration
def test_code_under_test_cannot_read_the_hidden_tests_or_the_solution(tmp_path):
    suite = Path(tempfile.mkdtemp(prefix="rtrl-suite-", dir="/var/tmp"))   # outside the sandbox's private /tmp
    try:
        suite.chmod(0o755)
        hidden = [str(suite / "user-1" / "tests" / "test_calc.py"), str(suite / "user-1" / "solution" / "calc.py")]
        probe = f"import os\nFOUND = [p for p in {hidden!r} if os.path.exists(p)]\n"
        tests = ("import calc\n\ndef test_add_adds():\n    assert calc.FOUND == []\n\n"
                 "def test_sub_subtracts():\n    pass\n")
        d = write_task(suite, calc=probe + CALC, tests=tests,
                       toml=TOML.replace(', "tests/test_calc.py::CalcCase::test_mul"', ""))
        for p in [d, *d.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        visible = run_sandboxed(["python", "-c", probe + "print(FOUND)"], tmp_path)
        assert visible.stdout.strip() == repr(hidden)        # readable to a sandbox that does not hide the suite
        g = grade(load_task(d), d / "repo")
        assert g.outcomes["tests/test_calc.py::test_add_adds"] == "passed", g.messages
    finally:
        shutil.rmtree(suite)


@pytest.mark.integration
def test_a_hanging_test_times_out_and_the_next_one_still_runs(tmp_path):
    tests = ("import time\n\ndef test_add_adds():\n    while True:\n        time.sleep(0.01)\n\n"
             "def test_sub_subtracts():\n    pass\n")
    d = write_task(tmp_path, tests=tests, toml=TOML.replace(', "tests/test_calc.py::CalcCase::test_mul"', "")
                   + "test_timeout_seconds = 0.5\n")
    g = grade(load_task(d), d / "repo")
    assert g.outcomes == {"tests/test_calc.py::test_add_adds": "failed",
                          "tests/test_calc.py::test_sub_subtracts": "passed"}
    assert "timed out" in g.messages["tests/test_calc.py::test_add_adds"]


@pytest.mark.integration
def test_grading_stopped_by_the_wall_clock_is_the_models_failure(tmp_path):
    calc = "import time\nwhile True:\n    time.sleep(0.01)\n"
    d = write_task(tmp_path, calc=calc, toml=TOML + "grade_timeout_seconds = 1\n")
    g = grade(load_task(d), d / "repo")
    assert not g.resolved and g.infra_error is None and g.limit_hit == "wall_clock"
    assert set(g.outcomes.values()) == {"missing"}


def test_sandbox_failure_is_an_infrastructure_error(user_task_dir, monkeypatch):
    monkeypatch.setattr(sandbox, "BWRAP", "/nonexistent/bwrap")
    task = load_task(user_task_dir)
    g = grade(task, task.repo_dir)
    assert g.infra_error and not g.resolved


def test_parse_results_ignores_lines_without_the_nonce_and_unknown_ids():
    out = '@@abc {"id": "a", "outcome": "passed"}\n@@xyz {"id": "b", "outcome": "passed"}\n@@abc {"id": "c"}\n'
    outcomes, messages = parse_results(out, "abc", ["a", "b"])
    assert outcomes == {"a": "passed", "b": "missing"} and list(messages) == ["b"]


def test_prepare_workdir_copies_the_snapshot_only(user_task_dir, tmp_path):
    task = load_task(user_task_dir)
    work = prepare_workdir(task, tmp_path / "w")
    assert [p.name for p in work.iterdir()] == ["calc.py"]
