"""The held-out gate suite for the default domain, built from the simulator's task generator.

Held out twice over: requests use the generator's `eval` phrasings (never in training traffic), and workspaces
come from negative seeds (`-(seed + 1)`), which no training path can use — the simulator, trainer and bootstrap
seeds are all configured `>= 0`. Each task becomes a real, runnable repository (`repo/app/*.py` with an
`__init__.py`), hidden tests that pin the requested change and the behaviour around it, and the reference file
as `solution/`. Kinds are drawn round-robin so the categories stay balanced. Everything is a function of
(n, seed): the same call writes the same bytes.
"""

from __future__ import annotations

import copy
import random
import shutil
from pathlib import Path

from evals.tasks.spec import Task, load_task
from codetasks import tasks as sim
from codetasks.workspace import Org, SourceFile, Workspace, ident, make_workspace, org_of

ORGS = 8
SAMPLE = [3, 1, 4, 1, 5, 9, 2, 6]   # the input every function's behaviour is pinned on


def workspace_seed(seed: int) -> int:
    """The simulator seed of the suite's workspaces: negative, so disjoint from every training seed."""
    return -(seed + 1)


def _module(path: str) -> str:
    return path[:-3].replace("/", ".")


def _behaviour(src: SourceFile) -> dict[str, list]:
    """name -> what the function returns on SAMPLE (the buggy ones skip the last element)."""
    return {ident(f.words, src.style): SAMPLE[:-1] if f.off_by_one else list(SAMPLE) for f in src.functions}


def _tests(task: sim.Task, before: SourceFile, after: SourceFile,
           kwonly: bool | None = None) -> tuple[str, list[str], list[str]]:
    """The hidden test module and its fail_to_pass / pass_to_pass function names. `kwonly`: the org's house rule
    for a new parameter (`Org.kwonly`), tested when it has one (keyword-only, or not); without one either passes."""
    lines = ["import importlib", "import inspect", "", f"SAMPLE = {SAMPLE!r}", "",
             "", "def _m():", f"    return importlib.import_module({_module(task.path)!r})", ""]
    f2p: list[str] = []
    p2p: list[str] = []

    def test(name: str, body: list[str], target: list[str]) -> None:
        lines.extend(["", f"def {name}():", *[f"    {b}" for b in body], ""])
        target.append(name)

    changed_consts = sorted(k for k in after.constants if after.constants[k] != before.constants.get(k))
    for k in changed_consts:
        test(f"test_{k.lower()}_is_{after.constants[k]}", [f"assert _m().{k} == {after.constants[k]!r}"], f2p)
    kept = {k: v for k, v in before.constants.items() if k not in changed_consts}
    if kept:
        test("test_other_constants_unchanged", [f"assert _m().{k} == {v!r}" for k, v in kept.items()], p2p)
    old_fns, new_fns = _behaviour(before), _behaviour(after)
    for f_before, f_after in zip(before.functions, after.functions):
        old, new = ident(f_before.words, before.style), ident(f_after.words, after.style)
        if old != new:   # rename: the new name exists and behaves as the old one did; the old one is gone
            test(f"test_{new}_exists_and_behaves_as_before",
                 [f"assert _m().{new}(list(SAMPLE)) == {old_fns[old]!r}"], f2p)
            test(f"test_{old}_is_gone", [f"assert not hasattr(_m(), {old!r})"], f2p)
        elif f_before.off_by_one != f_after.off_by_one:
            test(f"test_{new}_covers_the_last_element", [f"assert _m().{new}(list(SAMPLE)) == {new_fns[new]!r}"], f2p)
            test(f"test_{new}_handles_empty_input", [f"assert _m().{new}([]) == []"], p2p)
        elif f_before.params != f_after.params:
            name, default = f_after.params[-1].split("=")
            same = "is" if default in ("True", "False", "None") else "=="
            kind = {True: "KEYWORD_ONLY", False: "POSITIONAL_OR_KEYWORD", None: None}[kwonly]
            test(f"test_{new}_has_parameter_{name}_defaulting_to_{default.lower()}",
                 [f"p = inspect.signature(_m().{new}).parameters", f"assert {name!r} in p",
                  f"assert p[{name!r}].default {same} {default}"]
                 + ([f"assert p[{name!r}].kind is inspect.Parameter.{kind}"] if kind else []), f2p)
            test(f"test_{new}_accepts_{name}_by_keyword",
                 [f"assert _m().{new}(list(SAMPLE), {name}={default}) == {new_fns[new]!r}"], f2p)
            test(f"test_{new}_existing_calls_still_work", [f"assert _m().{new}(list(SAMPLE)) == {old_fns[old]!r}"],
                 p2p)
        else:
            test(f"test_{new}_behaviour_unchanged", [f"assert _m().{new}(list(SAMPLE)) == {old_fns[old]!r}"], p2p)
    return "\n".join(lines).rstrip() + "\n", f2p, p2p


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _task_toml(task_id: str, task: sim.Task, f2p: list[str], p2p: list[str]) -> str:
    ids = lambda names: "[" + ", ".join(_toml_str(f"tests/test_task.py::{n}") for n in names) + "]"  # noqa: E731
    return "\n".join([
        f"id = {_toml_str(task_id)}", f"category = {_toml_str(task.kind)}", f"cluster = {_toml_str(task.org_id)}",
        f"focus_file = {_toml_str(task.path)}", f"ambiguous = {'true' if task.ambiguous else 'false'}",
        f"clarification = {_toml_str(task.clarification)}", "max_turns = 6", "end_on_edit = true",
        "episode_timeout_seconds = 120", "grade_timeout_seconds = 30", "test_timeout_seconds = 5",
        f"fail_to_pass = {ids(f2p)}", f"pass_to_pass = {ids(p2p)}", "",
        "[limits]", "cpu_seconds = 10", "memory_mb = 1024", "file_size_mb = 8", "processes = 32",
        "wall_seconds = 15", "",
    ])


def _make(seed: int, i: int, ambiguous_rate: float, org: Org | None = None,
          split: str = "eval") -> tuple[Workspace, sim.Task]:
    """Task i: workspace i of org i % ORGS (or of `org`), kind i % 4 (a fresh workspace when the kind does not fit
    it)."""
    kind = sim.KINDS[i % len(sim.KINDS)]
    ws_seed = workspace_seed(seed)
    for attempt in range(100):
        ws = make_workspace(ws_seed, org or org_of(i % ORGS, ws_seed), i * 100 + attempt)
        rng = random.Random(f"eval-task:{seed}:{i}:{attempt}")
        try:
            return ws, sim.make_task(rng, ws, f"eval-{i:04d}", split=split, kind=kind,
                                 ambiguous_rate=ambiguous_rate)
        except IndexError:   # e.g. fix_off_by_one on a file without the bug
            continue
    raise RuntimeError(f"no workspace fits task {i} ({kind})")


def write_task(out: Path, task_id: str, ws: Workspace, task: sim.Task) -> Path:
    d = out / task_id
    if d.exists():
        shutil.rmtree(d)
    before = ws.files[task.path]
    solved = copy.deepcopy(ws)
    sim.apply_task(solved, task)
    after = solved.files[task.path]
    for path, src in ws.files.items():
        (d / "repo" / path).parent.mkdir(parents=True, exist_ok=True)
        (d / "repo" / path).write_text(src.render())
    (d / "repo" / "app" / "__init__.py").write_text("")
    (d / "solution" / task.path).parent.mkdir(parents=True, exist_ok=True)
    (d / "solution" / task.path).write_text(task.after)
    test_src, f2p, p2p = _tests(task, before, after, ws.org.kwonly)
    (d / "tests").mkdir()
    (d / "tests" / "test_task.py").write_text(test_src)
    (d / "prompt.md").write_text(task.request + "\n")
    (d / "system.md").write_text(sim.system_prompt(task.org_id) + "\n")
    (d / "task.toml").write_text(_task_toml(task_id, task, f2p, p2p))
    return d


def generate_suite(out_dir: str | Path, n: int, seed: int = 0, ambiguous_rate: float = 0.25,
                   org: Org | None = None, split: str = "eval") -> list[Task]:
    """Write `n` task folders `eval-0000` ... under `out_dir` and load them back. `ambiguous_rate` is the share
    of requests made ambiguous where the file allows it (as in the simulator's traffic). `org`: every task in that
    org's workspaces (its id and conventions: an org's own held-out tasks, for its specialized adapter's gate);
    else the suite's own ORGS orgs in turn. The workspaces are never the simulator's (negative seeds). `split`: the
    requests' phrasings (`codetasks.tasks.PHRASES`): "eval", never in training traffic (the held-out suite), or
    "train", as the users write them (an org's own suite: what its users will ask, in workspaces never seen)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for i in range(n):
        ws, task = _make(seed, i, ambiguous_rate, org, split)
        tasks.append(load_task(write_task(out, task.task_id, ws, task)))
    return tasks
