"""The tool executor: each protocol tool against a real work dir, paths confined to it, failures counted as broken
calls only when the model is at fault. run_terminal and lint go through the real sandbox."""

from __future__ import annotations

import os

import pytest

from evals import sandbox
from evals.sandbox import Limits
from evals.tools import PathError, ToolExecutor, resolve
from codetasks.workspace import EditError, apply_edit
from schemas.events import ToolErrorKind
from schemas.tool_protocol import ToolCall

needs_bwrap = pytest.mark.skipif(not os.access(sandbox.BWRAP, os.X_OK), reason="bubblewrap is not installed")
UTIL = "LIMIT = 3\n\n\ndef load(items):\n    return items\n"


@pytest.fixture
def work(tmp_path):
    w = tmp_path / "work"
    (w / "app").mkdir(parents=True)
    (w / "app" / "util.py").write_text(UTIL)
    (tmp_path / "secret.txt").write_text("host secret")
    return w


def call(name, **args):
    return ToolCall(name, args)


@pytest.mark.parametrize("path", ["/etc/passwd", "../secret.txt", "app/../../secret.txt", "~/x", ""])
def test_paths_outside_the_work_dir_are_rejected_as_broken_calls(work, path):
    r = ToolExecutor(work).execute(("read_file", {"path": path}))
    assert r.failed and "host secret" not in r.text and "root:" not in r.text
    assert r.error_kind in (ToolErrorKind.tool_error, ToolErrorKind.validation_error)


def test_absolute_path_error_says_paths_are_workspace_relative(work):
    with pytest.raises(PathError, match="relative to the workspace"):
        resolve(work, "/etc/passwd")


def test_dotdot_that_stays_inside_is_allowed(work):
    assert resolve(work, "app/../app/util.py") == (work / "app" / "util.py").resolve()


def test_symlink_leading_outside_is_rejected_for_read_edit_and_search(work):
    os.symlink(work.parent / "secret.txt", work / "app" / "link.txt")
    ex = ToolExecutor(work)
    assert ex.execute(call("read_file", path="app/link.txt")).failed
    assert ex.execute(call("edit_file", path="app/link.txt", old="host", new="x")).failed
    assert (work.parent / "secret.txt").read_text() == "host secret"
    assert ex.execute(call("search", query="host secret")).text == "no matches for 'host secret'"


def test_read_file_returns_the_text(work):
    r = ToolExecutor(work).execute(call("read_file", path="app/util.py"))
    assert (r.text, r.failed) == (UTIL, False)


@pytest.mark.parametrize("path,why", [("app/missing.py", "no such file"), ("app", "is a directory")])
def test_read_file_of_a_non_file_is_a_broken_call(work, path, why):
    r = ToolExecutor(work).execute(call("read_file", path=path))
    assert r.failed and why in r.text


def test_edit_file_applies_the_same_single_occurrence_replace_as_the_simulator(work):
    r = ToolExecutor(work).execute(call("edit_file", path="app/util.py", old="LIMIT = 3", new="LIMIT = 5"))
    assert r.edited and not r.failed
    assert (work / "app" / "util.py").read_text() == apply_edit(UTIL, "LIMIT = 3", "LIMIT = 5")


@pytest.mark.parametrize("old,why", [("LIMIT = 4", "not found"), ("items", "occurs 2 times")])
def test_edit_file_whose_old_text_is_missing_or_repeated_fails_and_changes_nothing(work, old, why):
    with pytest.raises(EditError):
        apply_edit(UTIL, old, "x")
    r = ToolExecutor(work).execute(call("edit_file", path="app/util.py", old=old, new="x"))
    assert r.failed and not r.edited and why in r.text and r.error_kind is ToolErrorKind.tool_error
    assert (work / "app" / "util.py").read_text() == UTIL


def test_invalid_arguments_are_a_validation_error(work):
    r = ToolExecutor(work).execute(("edit_file", {"path": "app/util.py", "old": "LIMIT"}))
    assert r.failed and r.error_kind is ToolErrorKind.validation_error and "missing argument" in r.text
    assert ToolExecutor(work).execute(("search", {"query": ""})).failed


def test_search_lists_matching_lines_with_positions(work):
    (work / "app" / "other.py").write_text("x = load([1])\n")
    r = ToolExecutor(work).execute(call("search", query="load"))
    assert r.text.splitlines() == ["app/other.py:1: x = load([1])", "app/util.py:4: def load(items):"]
    assert not r.failed


@pytest.mark.integration
@needs_bwrap
def test_run_terminal_reports_output_and_exit_status_without_counting_a_nonzero_exit_as_broken(work):
    r = ToolExecutor(work).execute(call("run_terminal", command="cat app/util.py | head -1; exit 2"))
    assert not r.failed and "LIMIT = 3" in r.text and "[exit code 2]" in r.text


@pytest.mark.integration
@needs_bwrap
def test_run_terminal_runs_in_the_sandbox(work):
    ex = ToolExecutor(work)   # the host path is under /tmp, private inside the sandbox
    r = ex.execute(call("run_terminal", command="cat ../secret.txt; cat " + str(work.parent / "secret.txt")))
    assert "host secret" not in r.text
    assert "Read-only file system" in ex.execute(call("run_terminal", command="touch /etc/rtrl-probe")).text


@pytest.mark.integration
@needs_bwrap
def test_run_terminal_that_hits_the_wall_clock_is_a_broken_call(work):
    r = ToolExecutor(work, Limits(wall_seconds=0.5)).execute(call("run_terminal", command="sleep 30"))
    assert r.failed and r.error_kind is ToolErrorKind.timeout and "killed after" in r.text


@pytest.mark.integration
@needs_bwrap
def test_lint_passes_clean_code_and_reports_a_syntax_error(work):
    ex = ToolExecutor(work)
    assert ex.execute(call("lint", path="app/util.py")).text == "lint app/util.py: no problems found"
    (work / "app" / "bad.py").write_text("def f(:\n    pass\n")
    r = ex.execute(call("lint", path="app/bad.py"))
    assert not r.failed and "app/bad.py:1" in r.text and "[exit code 1]" in r.text
    assert not (work / "app" / "__pycache__").exists()


def test_lint_of_a_non_python_file_is_a_broken_call(work):
    (work / "README").write_text("hi")
    assert ToolExecutor(work).execute(call("lint", path="README")).failed


def test_sandbox_failure_is_an_infrastructure_error_not_a_broken_call(work, monkeypatch):
    monkeypatch.setattr(sandbox, "BWRAP", "/nonexistent/bwrap")
    r = ToolExecutor(work).execute(call("run_terminal", command="true"))
    assert r.infra_error and not r.failed and r.error_kind is ToolErrorKind.infrastructure
