"""Loading task folders: a user-written folder loads; each kind of malformed folder fails with a message that names
the folder and the problem."""

from __future__ import annotations

import pytest

from evals.tasks import TaskError, load_suite, load_task
from tests.unit.evals.task_folders import TOML, write_task


def test_user_written_task_folder_loads(user_task_dir):
    t = load_task(user_task_dir)
    assert (t.id, t.spec.category, t.spec.cluster, t.prompt) == ("user-1", "bugfix", "acme", "add is broken")
    assert t.spec.fail_to_pass == ["tests/test_calc.py::test_add_adds"]
    assert t.solution_dir is not None and t.spec.limits.limits().processes == 64
    assert t.test_ids[-1] == "tests/test_calc.py::CalcCase::test_mul"


def _broken(tmp_path, why_fragment, **kw):
    d = write_task(tmp_path, **kw)
    with pytest.raises(TaskError, match=why_fragment) as e:
        load_task(d)
    assert str(d) in str(e.value)
    return d


@pytest.mark.parametrize("toml,why", [
    ("id = \"x\"\ncategory = ", "does not parse"),
    (TOML + "colour = \"red\"\n", "colour: Extra inputs are not permitted"),
    (TOML.replace('category = "bugfix"\n', ""), "category: Field required"),
    (TOML.replace('fail_to_pass = ["tests/test_calc.py::test_add_adds"]', "fail_to_pass = []"), "fail_to_pass"),
    (TOML.replace("tests/test_calc.py::test_add_adds", "test_add_adds"), "test ids must look like"),
    (TOML.replace("tests/test_calc.py::test_add_adds", "tests/../repo/calc.py::add"), "test ids must look like"),
    (TOML.replace('pass_to_pass = ["tests/test_calc.py::test_sub_subtracts"',
                  'pass_to_pass = ["tests/test_calc.py::test_add_adds"'), "both fail_to_pass and pass_to_pass"),
    (TOML + "ambiguous = true\n", "needs the user's clarification"),
    (TOML + "[limits]\nprocesses = 0\n", "limits.processes"),
    (TOML.replace("test_calc.py::test_add_adds", "test_nope.py::test_add_adds"), "test file of .* does not exist"),
    (TOML.replace('focus_file = "calc.py"', 'focus_file = "nope.py"'), "focus_file nope.py"),
])
def test_malformed_task_toml_is_rejected_with_the_reason(tmp_path, toml, why):
    _broken(tmp_path, why, toml=toml)


def test_missing_pieces_are_named(tmp_path):
    d = write_task(tmp_path, "a")
    (d / "prompt.md").write_text("  \n")
    with pytest.raises(TaskError, match="prompt.md"):
        load_task(d)
    d = write_task(tmp_path, "b")
    (d / "task.toml").unlink()
    with pytest.raises(TaskError, match="missing task.toml"):
        load_task(d)
    d = write_task(tmp_path, "c")
    (d / "repo" / "calc.py").unlink()
    (d / "repo").rmdir()
    with pytest.raises(TaskError, match="missing repo/"):
        load_task(d)
    with pytest.raises(TaskError, match="not a directory"):
        load_task(tmp_path / "nowhere")


def test_suite_loads_sorted_by_id_and_skips_underscore_dirs(tmp_path):
    write_task(tmp_path, "z", toml=TOML.replace('id = "user-1"', 'id = "a-task"'))
    write_task(tmp_path, "a", toml=TOML.replace('id = "user-1"', 'id = "b-task"'))
    (tmp_path / "_quarantine").mkdir()
    assert [t.id for t in load_suite(tmp_path)] == ["a-task", "b-task"]


def test_suite_with_duplicate_ids_or_no_tasks_is_rejected(tmp_path):
    with pytest.raises(TaskError, match="no task folders"):
        load_suite(tmp_path)
    write_task(tmp_path, "one")
    write_task(tmp_path, "two")
    with pytest.raises(TaskError, match="task id 'user-1' used by both one and two"):
        load_suite(tmp_path)
