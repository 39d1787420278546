"""The flaky-task check: a task enters the gate only if its tests judge the reference solution the same way
every time (docs/gate.md).

Each task is graded `runs` times on its snapshot and `runs` times on the reference solution. It is quarantined when
  * any test's outcome differs between runs of the same tree (randomness, time, ordering: the test is flaky),
  * a fail_to_pass test does not fail on the snapshot, or some test does not pass on the solution
    (the task is mis-specified: it would count a non-answer as resolved, or a right answer as unresolved),
  * it has no reference solution (it cannot be checked: fail closed), or grading it broke the sandbox.
A quarantined task is left out of the suite the gate runs; the report lists it with the reason.

`check_flaky_cached` keeps each verdict in a file next to the suite, keyed by the task's files, the number of runs
and the grading code: an unchanged task is not graded again by the next gate (a changed one, or new grading code,
is).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from evals.tasks.grade import GradeResult, grade, solved_workdir
from evals.tasks.spec import Task


def flaky_reason(task: Task, before: list[GradeResult], after: list[GradeResult]) -> str | None:
    """Why the task must be quarantined given its gradings on the snapshot (`before`) and the solution
    (`after`), or None when it is sound."""
    for label, runs in (("snapshot", before), ("solution", after)):
        broken = [r.infra_error for r in runs if r.infra_error]
        if broken:
            return f"grading the {label} failed: {broken[0]}"
        for test_id in task.test_ids:
            seen = {r.outcomes.get(test_id) for r in runs}
            if len(seen) > 1:
                return f"{test_id} changed outcome across runs on the {label}: {sorted(map(str, seen))}"
    first_before, first_after = before[0], after[0]
    for test_id in task.spec.fail_to_pass:
        if first_before.passed(test_id):
            return f"fail_to_pass test {test_id} passes on the snapshot"
    for test_id in task.spec.pass_to_pass:
        if not first_before.passed(test_id):
            return f"pass_to_pass test {test_id} does not pass on the snapshot ({first_before.outcomes.get(test_id)})"
    for test_id in task.test_ids:
        if not first_after.passed(test_id):
            return f"{test_id} does not pass on the reference solution ({first_after.outcomes.get(test_id)})"
    return None


def check_task(task: Task, runs: int = 3) -> str | None:
    if task.solution_dir is None:
        return "no reference solution (solution/) to check the tests against"
    with tempfile.TemporaryDirectory(prefix=f"rtrl-flaky-{task.id}-") as tmp:
        solved = solved_workdir(task, Path(tmp) / "solved")
        before = [grade(task, task.repo_dir) for _ in range(runs)]
        after = [grade(task, solved) for _ in range(runs)]
    return flaky_reason(task, before, after)


def check_flaky(tasks: Iterable[Task], runs: int = 3, workers: int = 2) -> dict[str, str]:
    """{task id: reason} for the tasks to quarantine; the others are sound. Tasks are checked in parallel
    (each grading is its own sandbox)."""
    if runs < 2:
        raise ValueError("runs must be at least 2 to see an outcome change")
    tasks = list(tasks)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        reasons = list(pool.map(lambda t: check_task(t, runs), tasks))
    return {t.id: why for t, why in zip(tasks, reasons) if why is not None}


def _digest(paths: Iterable[Path], root: Path | None = None) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        if p.is_file():
            h.update(str(p.relative_to(root) if root else p.name).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def grading_code_digest() -> str:
    """The code a verdict depends on besides the task: the sandbox and the grader."""
    import evals.sandbox
    import evals.tasks.grade
    import evals.tasks.runner

    return _digest(Path(m.__file__) for m in (evals.sandbox, evals.tasks.grade, evals.tasks.runner))


def task_key(task: Task, runs: int, code: str) -> str:
    """What a verdict depends on: the task's files, the runs, and the grading code (`grading_code_digest`)."""
    files = _digest(task.dir.rglob("*"), task.dir)
    return hashlib.sha256(f"{files}:{runs}:{code}".encode()).hexdigest()


def check_flaky_cached(tasks: Iterable[Task], runs: int, cache_file: Path, workers: int = 2
                       ) -> tuple[dict[str, str], int]:
    """`check_flaky` with verdicts kept in `cache_file`; (quarantined {id: reason}, tasks graded now)."""
    tasks = list(tasks)
    try:
        cache = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    code = grading_code_digest()          # once per check, not once per task
    keys = {t.id: task_key(t, runs, code) for t in tasks}
    todo = [t for t in tasks if keys[t.id] not in cache]
    if todo:
        found = check_flaky(todo, runs, workers)
        cache.update({keys[t.id]: found.get(t.id) for t in todo})
        tmp = cache_file.with_name(cache_file.name + ".tmp")
        try:
            tmp.write_text(json.dumps(cache, indent=0, sort_keys=True), encoding="utf-8")
            tmp.replace(cache_file)
        except OSError:   # a read-only suite folder: the verdicts stand, they are just not kept
            pass
    return {t.id: cache[keys[t.id]] for t in tasks if cache[keys[t.id]] is not None}, len(todo)
