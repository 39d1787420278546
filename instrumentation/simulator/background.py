"""Background tasks: the user hands a multi-step job to the agent and judges the whole result hours later (the long
loop of docs/simulator.md).

A background task has `background_steps` steps, each a clear request on its own file, run one after the other in a
session of their own; every request names the task (`metadata.task_id`). A step's reply is executed like any other
(a `tool_call_result` per call); a broken call or a question gets the step another turn with the error fed back, up
to `max_turns`. The agent works on a branch: its edits never touch the user's working copy, so a background request
has no suggestion, apply or snapshot of its own. After the last step the user goes on with other work and, an
`outcome_delay_s` later and in whatever session they are in by then, sends a `task_outcome`:

    every step right     accepted with p_accept_clean (half of those merged), else abandoned
    at least half right  accepted with p_accept_partial, else reverted with p_revert_failed, else abandoned
    fewer                reverted with p_revert_failed, else abandoned
    rating (p_rating)    4-5 when accepted with every step right, 3 when accepted otherwise, 1-2 when not

Randomness: each task draws from `Random(f"bg:{seed}:{user}:{n}")`, so its story depends only on the seed and the
policy's answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from codetasks.policy import PolicyReply, PolicyRequest
from codetasks.tasks import Task, grade, make_task
from codetasks.workspace import Workspace
from schemas.events import TaskOutcome

RETRY = "The last step did not go through ({why}). Make the change with one edit_file call; do not ask."


@dataclass
class BackgroundTask:
    task_id: str
    session_id: str
    steps: list[Task]
    rng: random.Random
    results: list[str] = field(default_factory=list)   # per finished step: correct | wrong | broken | question | error
    messages: list[dict[str, str]] = field(default_factory=list)
    turns: int = 0

    @property
    def step(self) -> Task:
        return self.steps[len(self.results)]


def judge(bg: BackgroundTask, cfg) -> tuple[str, int | None]:
    """The user's verdict on the whole result: (outcome, rating or None), by the rules in the module docstring."""
    rng, n = bg.rng, len(bg.results)
    right = bg.results.count("correct")
    if right == n:
        accepted = rng.random() < cfg.p_accept_clean
        outcome = ("merged" if rng.random() < 0.5 else "accepted") if accepted else "abandoned"
        rating = rng.choice((4, 5)) if accepted else rng.choice((1, 2))
    else:
        accepted = 2 * right >= n and rng.random() < cfg.p_accept_partial
        outcome = "accepted" if accepted else ("reverted" if rng.random() < cfg.p_revert_failed else "abandoned")
        rating = 3 if accepted else rng.choice((1, 2))
    return outcome, (rating if rng.random() < cfg.p_rating else None)


class BackgroundWork:
    """SimUser's background tasks (mixed into `user.SimUser`, whose scheduling, events and stats they use)."""

    def _start_background(self, t: datetime) -> None:
        """A background task on files of the workspace (the agent's branch: files with an edit of the user's
        pending are fine), `background_steps` of them (at most every file)."""
        cfg, files = self.cfg, self.ws.files
        rng = random.Random(f"bg:{cfg.seed}:{self.index}:{self._tasks}")
        task_id = f"{self.user_id}-{self.run}-bg{self._tasks}"
        picked = rng.sample(sorted(files), min(len(files), rng.randint(*cfg.background_steps)))
        steps = [make_task(rng, Workspace(self.ws.workspace_id, self.org, {p: files[p]}), f"{task_id}-s{i}",
                           ambiguous_rate=0.0) for i, p in enumerate(picked)]
        bg = BackgroundTask(task_id, f"{self.user_id}-{self.run}-bg{self._tasks}", steps, rng)
        bg.messages = bg.step.messages()
        self.stats.add(background_tasks=1)
        self.at(t + timedelta(seconds=1), self._ask_step, bg)

    def _ask_step(self, t: datetime, bg: BackgroundTask) -> None:
        t = self._now(t)
        bg.turns += 1
        request = PolicyRequest(list(bg.messages), self.user_id,
                                self._metadata(t, bg.session_id, task_id=bg.task_id), bg.step)
        if not self._call(t, request, self._on_step_reply, bg):
            self._step_done(t, bg, "error")

    def _on_step_reply(self, t: datetime, bg: BackgroundTask, reply: PolicyReply, asked: datetime) -> None:
        from instrumentation.simulator.user import Conversation, Turn

        task = bg.step
        g = grade(task, reply.parsed, clarified=True)
        self.stats.turn(Turn(reply.request_id, self.user_id, bg.session_id, bg.task_id, bg.turns, asked, g.outcome,
                             g.needless_question, reply.arm, reply.policy_version))
        self.stats.add(background_requests=1)
        self._tool_results(t, Conversation(task, bg.session_id, bg.rng, bg.messages), reply)
        if g.outcome in ("broken", "question") and bg.turns < self.cfg.max_turns:
            why = "a tool call failed" if g.outcome == "broken" else "no one is there to answer a question"
            bg.messages = bg.messages + [{"role": "assistant", "content": reply.text},
                                         {"role": "user", "content": RETRY.format(why=why)}]
            self.at(t + timedelta(seconds=1), self._ask_step, bg)
            return
        self._step_done(t, bg, g.outcome)

    def _step_done(self, t: datetime, bg: BackgroundTask, outcome: str) -> None:
        bg.results.append(outcome)
        bg.turns = 0
        if len(bg.results) < len(bg.steps):
            bg.messages = bg.step.messages()
            self.at(t + timedelta(seconds=1), self._ask_step, bg)
            return
        delay = timedelta(seconds=bg.rng.uniform(*self.cfg.outcome_delay_s))
        self.at(t + delay, self._send_outcome, bg)

    def _send_outcome(self, t: datetime, bg: BackgroundTask) -> None:
        outcome, rating = judge(bg, self.cfg)
        self.stats.add(**{f"background_{outcome}": 1})
        # in the session the user is in by now (a later one than the task's, usually)
        self._emit(TaskOutcome, t, self._session_id or bg.session_id, task_id=bg.task_id, outcome=outcome,
                   rating=rating)
