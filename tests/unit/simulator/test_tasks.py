"""The task generator: deterministic workspaces, reference responses that grade right, ambiguity, splits."""

import random

import pytest

from codetasks.tasks import KINDS, PHRASES, apply_task, grade, make_task
from codetasks.workspace import EditError, apply_edit, make_workspace, org_of
from schemas.events import ResponseKind
from schemas.tool_protocol import ToolCall, parse_response


def _tasks(split="train", n=200, seed=0):
    out = []
    for o in range(4):
        ws = make_workspace(seed, org_of(o, seed), 0)
        rng = random.Random(f"{seed}:{o}")
        for k in range(n // 4):
            t = make_task(rng, ws, f"t{o}-{k}", split=split)
            out.append(t)
            apply_task(ws, t)
    return out


def test_the_same_seed_gives_the_same_workspaces_and_tasks():
    assert _tasks(seed=3) == _tasks(seed=3)
    assert _tasks(seed=3) != _tasks(seed=4)


def test_reference_responses_grade_correct_and_ambiguous_first_turns_are_questions():
    tasks = _tasks()
    assert {t.kind for t in tasks} == set(KINDS) and any(t.ambiguous for t in tasks)
    for t in tasks:
        first = grade(t, parse_response(t.demonstration()))
        if t.ambiguous:
            assert first.outcome == "question" and not first.needless_question and t.candidates[0] in t.clarification
            assert grade(t, parse_response(t.demonstration(clarified=True)), clarified=True).correct
        else:
            assert first.correct and first.new_text == t.after


def test_orgs_name_things_in_their_own_style():
    styles = {org_of(i).style for i in range(4)}
    assert styles == {"snake", "camel"}
    camel = next(org_of(i) for i in range(8) if org_of(i).style == "camel")
    text = "".join(make_workspace(0, camel, 0).text(p) for p in make_workspace(0, camel, 0).files)
    assert "def " in text and not any("_" in line.split("(")[0] for line in text.splitlines() if line.startswith("def "))


def test_wrong_broken_and_needless_responses_are_told_apart():
    t = next(t for t in _tasks() if not t.ambiguous and t.kind == "change_constant")
    assert grade(t, parse_response("Which constant?")).needless_question
    wrong = ToolCall("edit_file", {**t.edit.arguments, "new": t.edit.arguments["new"] + "0"})
    assert grade(t, parse_response(wrong.text())).outcome == "wrong"
    missing = ToolCall("edit_file", {**t.edit.arguments, "old": "NOT_THERE = 1"})
    g = grade(t, parse_response(missing.text()))
    assert g.outcome == "broken" and "not found" in g.errors[0]
    assert grade(t, parse_response('<tool_call>\n{"name": "edit_file"\n</tool_call>')).outcome == "broken"
    assert grade(t, parse_response("Done.")).outcome == "wrong"
    assert grade(t, parse_response("Done.")).kind is ResponseKind.answer


def test_eval_phrasings_never_appear_in_training_requests():
    train = {t.request for t in _tasks("train")}
    evals = _tasks("eval")
    templates = {p.split("{")[0] for ps in PHRASES["eval"].values() for p in ps if not p.startswith("{")}
    assert all(not r.startswith(tuple(templates)) for r in train)
    assert not train & {t.request for t in evals}


def test_edit_file_needs_exactly_one_occurrence():
    assert apply_edit("a = 1\nb = 2\n", "b = 2", "b = 3") == "a = 1\nb = 3\n"
    with pytest.raises(EditError, match="not found"):
        apply_edit("a = 1\n", "c", "d")
    with pytest.raises(EditError, match="2 times"):
        apply_edit("x\nx\n", "x", "y")


def _chain(org, n=60):
    ws = make_workspace(0, org, 0)
    rng = random.Random("house")
    out = []
    for k in range(n):
        t = make_task(rng, ws, f"h{k}", ambiguous_rate=0.0)
        out.append(t)
        apply_task(ws, t)
    return out


def test_a_keyword_only_house_rule_puts_new_parameters_after_one_star_and_changes_nothing_else():
    from dataclasses import replace

    org = org_of(1)
    plain, positional, kwonly = _chain(org), _chain(replace(org, kwonly=False)), _chain(replace(org, kwonly=True))
    assert plain == positional                          # a positional rule writes what no rule writes
    added = [t for t in kwonly if t.kind == "add_parameter"]
    assert len(added) >= 5 and [t.kind for t in kwonly] == [t.kind for t in plain]
    for t in added:
        new_def = next(line for line in t.after.splitlines() if line.startswith("def ")
                       and line not in t.before.splitlines())
        assert ", *, " in new_def and new_def.count("*") == 1, new_def     # one star, before the new parameters
        assert grade(t, parse_response(t.demonstration())).correct
        positional_edit = t.demonstration().replace("*, ", "", 1)
        assert not grade(t, parse_response(positional_edit)).correct  # the org's users take only their form
    assert sum(", *, " in t.after for t in plain) == 0
