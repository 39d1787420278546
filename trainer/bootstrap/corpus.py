"""Demonstrations from the task generator: the supervised data the default policy is bootstrapped on.

Each example is one assistant turn: the prompt is the conversation so far in the chat format
(`schemas.chat_format.render`, generation prompt included) and the completion is the generator's reference
response followed by the end-of-turn token. An ambiguous task gives two examples: the first turn, whose reference
is a question, and the turn after the user's clarification, whose reference is the edit. A share of tasks
(`repair_rate`) gives one more: a repair turn, where the conversation holds a failed attempt at the edit (wrong,
broken, malformed, unclosed, or a needless question) and the user's complaint, and the reference is the edit.
Without them the policy never sees a conversation that goes on after its own mistake: measured on the default v0,
every such turn (22 % of the demo's requests) came out as an empty `<tool_call>` with probability ~0.96, a failure
no reinforcement from its own samples can mend (it never samples anything better).

Workspaces are drawn from many orgs (both naming conventions; with `house_rules`, each workspace's rule for new
parameters drawn at random); within a workspace a short chain of tasks is
applied one after the other (`apply_task`), so files drift the way they do under real traffic. Everything is a
function of the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from codetasks import followups
from codetasks.policy import FLAWS, flawed_edit
from codetasks.tasks import Task, apply_task, make_task
from codetasks.workspace import make_workspace, org_of
from schemas.chat_format import END, render


@dataclass(frozen=True)
class Example:
    prompt: str       # rendered conversation, ending with the assistant generation prompt
    completion: str   # reference response + END
    kind: str         # the task's kind
    turn: str         # "first" | "clarified" | "repair"
    ambiguous: bool


def generate_tasks(seed: int, workspaces: int, tasks_per_workspace: int, orgs: int,
                   split: str = "train", first_index: int = 0, house_rules: bool = False) -> list[Task]:
    """`workspaces` workspaces (round-robin over `orgs` orgs) with a chain of tasks each, all from `seed`.
    `house_rules`: each workspace's new parameters keyword-only or not at random, whatever its org."""
    tasks = []
    for w in range(first_index, first_index + workspaces):
        org = org_of(w % orgs, seed)
        if house_rules:
            org = replace(org, kwonly=random.Random(f"house:{seed}:{w}").random() < 0.5)
        ws = make_workspace(seed, org, w)
        rng = random.Random(f"tasks:{seed}:{split}:{w}")
        for k in range(tasks_per_workspace):
            task = make_task(rng, ws, f"{ws.workspace_id}-{k}", split=split)
            tasks.append(task)
            apply_task(ws, task)
    return tasks


def examples_of(task: Task, repair_rate: float = 0.0) -> list[Example]:
    """The task's demonstration turns: one, or two for an ambiguous task, and a repair turn for a seeded
    `repair_rate` share of tasks."""
    out = [Example(render(task.messages()), task.demonstration() + END, task.kind, "first", task.ambiguous)]
    if task.ambiguous:
        out.append(Example(render(task.clarified_messages(task.question)), task.demonstration(clarified=True) + END,
                           task.kind, "clarified", True))
    rng = random.Random(f"repair:{task.task_id}")
    if rng.random() < repair_rate:
        out.append(Example(render(repair_messages(task, rng)), task.demonstration(clarified=True) + END, task.kind,
                           "repair", task.ambiguous))
    return out


def repair_messages(task: Task, rng: random.Random) -> list[dict[str, str]]:
    """The conversation up to a failed attempt (a flaw drawn from `rng`) and the user's complaint about it, as the
    simulated users write it."""
    before = task.clarified_messages(task.question) if task.ambiguous else task.messages()
    flaw = rng.choice(FLAWS + (() if task.ambiguous else ("needless",)))
    if flaw == "needless":
        attempt, complaint = "Which file do you mean?", followups.pick(rng, followups.NEEDLESS)
    else:
        attempt = flawed_edit(task, flaw)
        complaint = followups.pick(rng, followups.WRONG if flaw == "wrong" else followups.BROKEN)
    return before + [{"role": "assistant", "content": attempt}, {"role": "user", "content": complaint}]


def build_corpus(seed: int, workspaces: int, tasks_per_workspace: int, orgs: int,
                 repair_rate: float = 0.0, house_rules: bool = False) -> list[Example]:
    """The SFT corpus: every demonstration turn of the generated train-split tasks, in generation order."""
    return [ex for task in generate_tasks(seed, workspaces, tasks_per_workspace, orgs, house_rules=house_rules)
            for ex in examples_of(task, repair_rate)]
