"""The evaluation task format: one directory per task, loadable whether generated or written by a user.

    <task>/
      task.toml     metadata (the `TaskSpec` fields below; unknown keys are errors)
      prompt.md     the user's request: terse and underspecified on purpose, as users write them
      system.md     optional system prompt the agent gets first (e.g. the org's conventions)
      repo/         the repository snapshot the agent starts from (copied into a fresh work dir per episode)
      tests/        hidden tests, outside repo/ so the agent never sees them; run by `evals.tasks.runner`
      solution/     optional reference solution: the files (repo-relative) a right answer produces; the flaky
                    check overlays them on repo/ and needs them

A test id is `tests/<file>.py::<function>` (relative to the task dir). Tests are plain functions using `assert`
(pytest style, without fixtures) or `unittest.TestCase` methods (`::Class::method`). fail_to_pass tests fail on the
snapshot and pass once the task is done; pass_to_pass tests pass on both (they catch collateral damage).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evals.sandbox import Limits

TEST_ID = re.compile(r"^tests/[\w./-]+\.py::[A-Za-z_]\w*(::[A-Za-z_]\w*)?$")


class TaskError(ValueError):
    """A task folder that cannot be used, with the folder and the reason."""


class LimitsSpec(BaseModel):
    """task.toml [limits]: the sandbox limits of the agent's commands (run_terminal, lint)."""
    model_config = ConfigDict(extra="forbid")

    cpu_seconds: int = Field(default=20, ge=1, le=3600)
    memory_mb: int = Field(default=1024, ge=64, le=65536)
    file_size_mb: int = Field(default=16, ge=1, le=4096)
    processes: int = Field(default=64, ge=4, le=4096)
    wall_seconds: float = Field(default=30.0, gt=0, le=3600)
    output_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    tmp_mb: int = Field(default=64, ge=1, le=4096)

    def limits(self) -> Limits:
        return Limits(**self.model_dump())


class TaskSpec(BaseModel):
    """task.toml."""
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$", description="Unique within a suite.")
    category: str = Field(min_length=1, max_length=64, description="For the per-category breakdown.")
    cluster: str = Field(default="", max_length=128, description="Repository cluster (e.g. the org).")
    focus_file: str = Field(default="", description="The file the user has open (repo-relative), shown to the agent.")
    ambiguous: bool = Field(default=False, description="The prompt needs a clarifying question to be solvable.")
    clarification: str = Field(default="", description="The user's answer if the agent asks a question.")
    max_turns: int = Field(default=8, ge=1, le=100, description="Model responses per episode.")
    end_on_edit: bool = Field(default=False, description="The episode ends with the first response that applied an "
                              "edit (an inline-edit flow: the suggestion goes to the user, who does not reply to "
                              "the tool result). Otherwise it ends with a plain answer or at max_turns.")
    episode_timeout_seconds: float = Field(default=300.0, gt=0, le=7200, description="Wall budget per episode.")
    grade_timeout_seconds: float = Field(default=60.0, gt=0, le=3600, description="Wall budget of the hidden tests.")
    test_timeout_seconds: float = Field(default=10.0, gt=0, le=3600, description="Per hidden test.")
    fail_to_pass: list[str] = Field(min_length=1)
    pass_to_pass: list[str] = Field(default_factory=list)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)

    @field_validator("fail_to_pass", "pass_to_pass")
    @classmethod
    def _test_ids(cls, ids: list[str]) -> list[str]:
        bad = [i for i in ids if not TEST_ID.match(i) or ".." in i]
        if bad:
            raise ValueError(f"test ids must look like tests/test_x.py::test_name; bad: {bad}")
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate test ids")
        return ids

    @model_validator(mode="after")
    def _consistent(self) -> "TaskSpec":
        both = set(self.fail_to_pass) & set(self.pass_to_pass)
        if both:
            raise ValueError(f"tests both fail_to_pass and pass_to_pass: {sorted(both)}")
        if self.ambiguous and not self.clarification:
            raise ValueError("an ambiguous task needs the user's clarification answer")
        return self


@dataclass(frozen=True)
class Task:
    spec: TaskSpec
    dir: Path
    prompt: str
    system: str = ""

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def repo_dir(self) -> Path:
        return self.dir / "repo"

    @property
    def tests_dir(self) -> Path:
        return self.dir / "tests"

    @property
    def solution_dir(self) -> Path | None:
        d = self.dir / "solution"
        return d if d.is_dir() else None

    @property
    def test_ids(self) -> list[str]:
        return [*self.spec.fail_to_pass, *self.spec.pass_to_pass]


def _fail(d: Path, why: str) -> TaskError:
    return TaskError(f"task folder {d}: {why}")


def load_task(d: str | Path) -> Task:
    """Load and check one task folder; TaskError says what is wrong."""
    d = Path(d)
    if not d.is_dir():
        raise _fail(d, "not a directory")
    toml_path = d / "task.toml"
    if not toml_path.is_file():
        raise _fail(d, "missing task.toml")
    try:
        raw = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise _fail(d, f"task.toml does not parse: {e}") from None
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as e:
        errors = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'task.toml'}: {err['msg']}" for err in e.errors())
        raise _fail(d, f"task.toml is invalid: {errors}") from None
    prompt_path = d / "prompt.md"
    if not prompt_path.is_file() or not prompt_path.read_text(encoding="utf-8").strip():
        raise _fail(d, "missing or empty prompt.md")
    if not (d / "repo").is_dir():
        raise _fail(d, "missing repo/ (the repository snapshot)")
    if not (d / "tests").is_dir():
        raise _fail(d, "missing tests/ (the hidden tests)")
    for test_id in spec.fail_to_pass + spec.pass_to_pass:
        if not (d / test_id.split("::")[0]).is_file():
            raise _fail(d, f"test file of {test_id} does not exist")
    if spec.focus_file and not (d / "repo" / spec.focus_file).is_file():
        raise _fail(d, f"focus_file {spec.focus_file} is not a file of repo/")
    if (d / "solution").exists() and not (d / "solution").is_dir():
        raise _fail(d, "solution must be a directory")
    system_path = d / "system.md"
    system = system_path.read_text(encoding="utf-8").strip() if system_path.is_file() else ""
    return Task(spec, d.resolve(), prompt_path.read_text(encoding="utf-8").strip(), system)


def load_suite(d: str | Path) -> list[Task]:
    """Every task folder directly under `d` (names starting with '.' or '_' are skipped), sorted by id."""
    d = Path(d)
    if not d.is_dir():
        raise TaskError(f"suite {d}: not a directory")
    tasks = [load_task(p) for p in sorted(d.iterdir()) if p.is_dir() and not p.name.startswith((".", "_"))]
    if not tasks:
        raise TaskError(f"suite {d}: no task folders")
    seen: dict[str, Path] = {}
    for t in tasks:
        if t.id in seen:
            raise TaskError(f"suite {d}: task id {t.id!r} used by both {seen[t.id].name} and {t.dir.name}")
        seen[t.id] = t.dir
    return sorted(tasks, key=lambda t: t.id)
