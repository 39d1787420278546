"""Demonstrations from the task generator: the supervised data the default policy is bootstrapped on.

Each example is one assistant turn: the prompt is the conversation so far in the chat format
(`schemas.chat_format.render`, generation prompt included) and the completion is the generator's reference
response followed by the end-of-turn token. An ambiguous task gives two examples: the first turn, whose reference
is a question, and the turn after the user's clarification, whose reference is the edit.

Workspaces are drawn from many orgs (both naming conventions); within a workspace a short chain of tasks is
applied one after the other (`apply_task`), so files drift the way they do under real traffic. Everything is a
function of the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from instrumentation.simulator.tasks import Task, apply_task, make_task
from instrumentation.simulator.workspace import make_workspace, org_of
from schemas.chat_format import END, render


@dataclass(frozen=True)
class Example:
    prompt: str       # rendered conversation, ending with the assistant generation prompt
    completion: str   # reference response + END
    kind: str         # the task's kind
    turn: str         # "first" | "clarified"
    ambiguous: bool


def generate_tasks(seed: int, workspaces: int, tasks_per_workspace: int, orgs: int,
                   split: str = "train", first_index: int = 0) -> list[Task]:
    """`workspaces` workspaces (round-robin over `orgs` orgs) with a chain of tasks each, all from `seed`."""
    tasks = []
    for w in range(first_index, first_index + workspaces):
        org = org_of(w % orgs, seed)
        ws = make_workspace(seed, org, w)
        rng = random.Random(f"tasks:{seed}:{split}:{w}")
        for k in range(tasks_per_workspace):
            task = make_task(rng, ws, f"{ws.workspace_id}-{k}", split=split)
            tasks.append(task)
            apply_task(ws, task)
    return tasks


def examples_of(task: Task) -> list[Example]:
    """The task's demonstration turns (one, or two for an ambiguous task)."""
    out = [Example(render(task.messages()), task.demonstration() + END, task.kind, "first", task.ambiguous)]
    if task.ambiguous:
        out.append(Example(render(task.clarified_messages(task.question)), task.demonstration(clarified=True) + END,
                           task.kind, "clarified", True))
    return out


def build_corpus(seed: int, workspaces: int, tasks_per_workspace: int, orgs: int) -> list[Example]:
    """The SFT corpus: every demonstration turn of the generated train-split tasks, in generation order."""
    return [ex for task in generate_tasks(seed, workspaces, tasks_per_workspace, orgs) for ex in examples_of(task)]
