"""The held-out suite generator: deterministic for a seed, held out from training (eval phrasings, negative
workspace seeds), and every task's hidden tests separate the snapshot from the reference solution."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from evals.tasks import load_suite
from evals.tasks.generate import generate_suite, workspace_seed
from evals.tasks.grade import grade, solved_workdir
from codetasks.tasks import KINDS, PHRASES
from tests.unit.evals.task_folders import needs_bwrap


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    d = tmp_path_factory.mktemp("suite")
    generate_suite(d, 16, seed=3)
    return d


def test_same_seed_writes_the_same_bytes_and_another_seed_differs(suite, tmp_path):
    generate_suite(tmp_path / "again", 16, seed=3)
    assert _tree(tmp_path / "again") == _tree(suite)
    generate_suite(tmp_path / "other", 16, seed=4)
    assert _tree(tmp_path / "other") != _tree(suite)


def test_suite_loads_with_balanced_categories_and_complete_metadata(suite):
    tasks = load_suite(suite)
    assert len(tasks) == 16
    assert Counter(t.spec.category for t in tasks) == {k: 4 for k in KINDS}
    for t in tasks:
        assert t.spec.focus_file.startswith("app/") and (t.repo_dir / t.spec.focus_file).is_file()
        assert t.solution_dir is not None and (t.solution_dir / t.spec.focus_file).is_file()
        assert t.spec.cluster.startswith("o") and t.spec.fail_to_pass and t.spec.pass_to_pass
        assert not any(p.name.startswith("test_") for p in t.repo_dir.rglob("*"))   # hidden tests stay hidden


def _pattern(template: str) -> re.Pattern:
    parts = re.split(r"\{\w+\}", template)
    return re.compile("^" + ".+".join(re.escape(p) for p in parts) + "$", re.IGNORECASE)


def test_prompts_use_only_eval_phrasings_never_training_ones(suite):
    train = [_pattern(t) for ts in PHRASES["train"].values() for t in ts]
    evals = [_pattern(t) for ts in PHRASES["eval"].values() for t in ts]
    for t in load_suite(suite):
        assert any(p.match(t.prompt) for p in evals), t.prompt
        assert not any(p.match(t.prompt) for p in train), t.prompt


def test_workspace_seeds_are_negative_so_disjoint_from_training_seeds():
    assert all(workspace_seed(s) < 0 for s in range(100))


def test_ambiguous_tasks_carry_the_users_clarification(tmp_path):
    tasks = generate_suite(tmp_path, 24, seed=0, ambiguous_rate=1.0)
    ambiguous = [t for t in tasks if t.spec.ambiguous]
    assert ambiguous
    for t in ambiguous:
        assert t.spec.clarification.rstrip(".") in t.solution_dir.joinpath(t.spec.focus_file).read_text()
        assert t.spec.category in ("change_constant", "add_parameter")


@pytest.mark.integration
@needs_bwrap
def test_every_fail_to_pass_test_fails_on_the_snapshot_and_passes_on_the_solution(suite, tmp_path):
    for t in load_suite(suite):
        before = grade(t, t.repo_dir)
        after = grade(t, solved_workdir(t, tmp_path / t.id))
        assert before.infra_error is None and after.infra_error is None
        assert not any(before.passed(i) for i in t.spec.fail_to_pass), (t.id, before.outcomes)
        assert all(before.passed(i) for i in t.spec.pass_to_pass), (t.id, before.outcomes)
        assert after.resolved, (t.id, after.messages)


@pytest.mark.integration
@needs_bwrap
def test_a_wrong_edit_does_not_resolve_the_task(suite, tmp_path):
    """The tests pin the requested value, not just "something changed"."""
    t = next(t for t in load_suite(suite) if t.spec.category == "change_constant")
    work = solved_workdir(t, tmp_path / "wrong")
    f = work / t.spec.focus_file
    before = (t.repo_dir / t.spec.focus_file).read_text()
    changed = next(line for line in f.read_text().splitlines() if line not in before.splitlines())
    name, value = changed.split(" = ")
    f.write_text(f.read_text().replace(changed, f"{name} = {int(value) + 1}"))
    assert not grade(t, work).resolved


def test_an_orgs_own_suite_is_in_its_workspaces_with_its_naming_convention(tmp_path):
    from codetasks.workspace import Org

    for style in ("snake", "camel"):
        generate_suite(tmp_path / style, 8, seed=3, org=Org("o2", style))
        tasks = load_suite(tmp_path / style)
        assert {t.spec.cluster for t in tasks} == {"o2"} and all("org o2:" in t.system for t in tasks)
        sources = "".join((t.solution_dir / t.spec.focus_file).read_text() for t in tasks)
        camel, snake = re.search(r"def [a-z]+[A-Z]\w*\(", sources), re.search(r"def [a-z]+_[a-z]\w*\(", sources)
        assert (camel is not None, snake is not None) == ((True, False) if style == "camel" else (False, True))


@pytest.mark.integration
@needs_bwrap
@pytest.mark.parametrize("kwonly", [True, False])
def test_an_orgs_suite_tests_its_house_rule_for_new_parameters(tmp_path, kwonly):
    """A keyword-only org's add_parameter tasks resolve with the parameter after `*` and not without it; a
    positional org's the other way round. A suite without a rule takes either (the held-out suite)."""
    from codetasks.workspace import Org

    generate_suite(tmp_path / "org", 8, seed=3, org=Org("o0", "snake", kwonly=kwonly))
    generate_suite(tmp_path / "any", 8, seed=3, org=Org("o0", "snake"))
    for name, rule in (("org", kwonly), ("any", None)):
        added = [t for t in load_suite(tmp_path / name) if t.spec.category == "add_parameter"]
        assert added
        for t in added:
            assert grade(t, solved_workdir(t, tmp_path / f"{name}-{t.spec.id}")).resolved
            work = solved_workdir(t, tmp_path / f"{name}-{t.spec.id}-other")
            f = work / t.spec.focus_file
            text = f.read_text()
            new_def = next(line for line in text.splitlines() if line.startswith("def ")
                           and line not in (t.repo_dir / t.spec.focus_file).read_text().splitlines())
            head, new = new_def[:-2].rsplit(", ", 1)
            other = f"{head.removesuffix(', *')}, {new}):" if "*" in new_def else f"{head}, *, {new}):"
            f.write_text(text.replace(new_def, other))
            assert grade(t, work).resolved is (rule is None), (rule, other)
