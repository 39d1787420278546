"""Grade a work dir against a task's hidden tests, inside the sandbox.

The agent's work dir is copied into a fresh grading dir (`repo/`), next to a copy of the hidden tests (`hidden/`)
and the stdlib runner, so grading never changes the work dir, never sees a file the agent left in a place the
tests would shadow, and runs with the same containment as the agent's own commands. The task suite is hidden
from the sandbox (its tests and reference solutions must not be readable by the code under test).

resolved = every fail_to_pass and pass_to_pass test passed. A test the runner did not report (killed by the wall
clock, the process exited) is `missing` and counts as not passed — the model's fault. Only a sandbox that could
not run at all is an infrastructure error.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from evals.sandbox import Limits, run_sandboxed
from evals.tasks.spec import Task

RUNNER = Path(__file__).with_name("runner.py")
# Everything outside the task's work dir that grading needs is ours; skip what an agent may leave behind.
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


@dataclass
class GradeResult:
    task_id: str
    resolved: bool
    outcomes: dict[str, str] = field(default_factory=dict)   # test id -> passed | failed | error | missing
    messages: dict[str, str] = field(default_factory=dict)   # test id -> failure text (not passed only)
    infra_error: str | None = None
    seconds: float = 0.0
    limit_hit: str | None = None

    def passed(self, test_id: str) -> bool:
        return self.outcomes.get(test_id) == "passed"


def grading_limits(task: Task) -> Limits:
    """The agent's limits, with the grading wall budget and room for every test's result line."""
    lim = task.spec.limits
    return Limits(cpu_seconds=max(lim.cpu_seconds, int(task.spec.grade_timeout_seconds) + 1),
                  memory_mb=lim.memory_mb, file_size_mb=lim.file_size_mb, processes=lim.processes,
                  wall_seconds=task.spec.grade_timeout_seconds, output_bytes=1024 * 1024, tmp_mb=lim.tmp_mb)


def prepare_grading_dir(task: Task, workdir: str | Path, dest: Path) -> None:
    shutil.copytree(workdir, dest / "repo", symlinks=True, ignore=_IGNORE)
    shutil.copytree(task.tests_dir, dest / "hidden" / "tests", symlinks=True, ignore=_IGNORE)
    shutil.copy2(RUNNER, dest / "runner.py")


def parse_results(stdout: str, nonce: str, ids: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    outcomes = {i: "missing" for i in ids}
    messages = {i: "not reported (the test process was killed or exited)" for i in ids}
    marker = f"@@{nonce} "
    for line in stdout.splitlines():
        if not line.startswith(marker):
            continue
        try:
            rec = json.loads(line[len(marker):])
        except json.JSONDecodeError:
            continue
        if rec.get("id") in outcomes and rec.get("outcome") in ("passed", "failed", "error"):
            outcomes[rec["id"]] = rec["outcome"]
            messages[rec["id"]] = rec.get("message", "")
    return outcomes, {i: m for i, m in messages.items() if outcomes[i] != "passed"}


def grade(task: Task, workdir: str | Path, ids: list[str] | None = None) -> GradeResult:
    """Run the task's hidden tests (or `ids`) against a copy of `workdir`."""
    ids = list(ids) if ids is not None else task.test_ids
    t0 = time.monotonic()
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix=f"rtrl-grade-{task.id}-") as tmp:
        scratch = Path(tmp)
        try:
            prepare_grading_dir(task, workdir, scratch)
        except OSError as e:
            return GradeResult(task.id, False, infra_error=f"cannot copy the work dir for grading: {e}",
                               seconds=time.monotonic() - t0)
        argv = ["python", "runner.py", "repo", "hidden", str(task.spec.test_timeout_seconds), *ids]
        r = run_sandboxed(argv, scratch, grading_limits(task), stdin=nonce + "\n", hide=[str(task.dir)])
    if r.infra_error:
        return GradeResult(task.id, False, infra_error=r.infra_error, seconds=time.monotonic() - t0)
    outcomes, messages = parse_results(r.stdout, nonce, ids)
    if r.timed_out or r.limit_hit:
        why = f"grading stopped: {r.limit_hit or 'wall_clock'}"
        messages = {i: (m if outcomes[i] != "missing" else why) for i, m in messages.items()}
    resolved = all(o == "passed" for o in outcomes.values())
    return GradeResult(task.id, resolved, outcomes, messages, None, time.monotonic() - t0, r.limit_hit)


def solved_workdir(task: Task, dest: Path) -> Path:
    """repo/ with the reference solution's files laid over it, at `dest` (for the flaky check)."""
    if task.solution_dir is None:
        raise ValueError(f"task {task.id} has no reference solution")
    shutil.copytree(task.repo_dir, dest, symlinks=True)
    shutil.copytree(task.solution_dir, dest, symlinks=True, dirs_exist_ok=True)
    return dest


def prepare_workdir(task: Task, dest: str | Path) -> Path:
    """A fresh copy of the task's repository snapshot for one episode (the agent's work dir)."""
    dest = Path(dest)
    shutil.copytree(task.repo_dir, dest, symlinks=True)
    return dest
