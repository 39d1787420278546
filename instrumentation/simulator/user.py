"""A simulated user: an org member with a workspace, working in sessions of coding tasks, reacting to the policy.

Per task (times are simulated; every probability and delay is `SimulatorConfig`):
  request      make a task on a free file (`make_task`), call the policy with the conversation so far
  reply        grade it (`tasks.grade`); report a `tool_call_result` per executed call (an edit_file whose old
               text is not in the file: ok=false, error_kind tool_error, the model's fault)
  edit         `suggestion_shown` (hunks: the changed lines' fingerprints); after reading it, apply (a correct one
               with p_apply_correct, a wrong one with p_apply_wrong) -> `edit_applied` + a save snapshot, else
               `edit_rejected`. An applied edit is kept or reverted (correct ones kept with p_keep_correct, wrong
               ones reverted with p_revert_wrong) within revert_delay_s; a revert restores the file and saves it.
               A periodic `codebase_snapshot` of the file follows snapshot_delay_s after the apply (= the reward
               spec's persistence horizon, after every revert): it shows the kept or reverted text.
  follow-ups   `followup_message` (previous_request_id = the reply): dissatisfied after a wrong or broken edit,
               "why are you asking? just do it" after a needless question, the task's clarification after a
               needed one, sometimes thanks after a correct edit (texts: `followups.py`)
  next turn    after a clarification, a complaint about a rejected / broken edit (p_retry) or a needless
               question, the message is the conversation's next turn (the policy tries again, up to max_turns)
With `background_rate` > 0 some tasks are handed to the agent in the background instead: several steps, judged
as a whole hours later with a `task_outcome` (background.py).
A file with an applied edit is locked until its periodic snapshot (one edit's fate per snapshot); tasks go to
free files. Kept edits become the workspace's state; a kept edit the task generator cannot represent is
rewritten by the user cleanup_delay_s after the apply (past the horizon).

Randomness: sessions and tasks draw from `Random(f"user:{seed}:{i}")`, each task's reactions from
`Random(f"task:{seed}:{i}:{k}")`, so a task's story depends only on the seed and the policy's answers, not on
how users interleave. Event ids are uuid5 of (run, user, n): the same seed and policy give the same events.
"""

from __future__ import annotations

import dataclasses
import difflib
import heapq
import random
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Protocol

from instrumentation.fingerprint import file_id, line_fingerprints
from instrumentation.simulator.background import BackgroundWork
from codetasks import followups
from instrumentation.simulator.clock import SimClock
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import Policy, PolicyError, PolicyReply, PolicyRequest
from codetasks.tasks import Grade, Task, apply_task, grade, make_task
from codetasks.workspace import EditError, Workspace, apply_edit, make_workspace
from schemas import Event
from schemas.events import (CodebaseSnapshot, EditApplied, EditRejected, FollowupMessage, Hunk,
                            SnapshotTrigger, SuggestionShown, ToolCallResult, ToolErrorKind)

CLIENT_VERSION = "rtrl-simulator/1"
NAMESPACE = uuid.UUID("0e7c6c1a-3f0b-4d5e-9a51-2f6f1e0b7c11")


class EventSink(Protocol):
    def emit(self, event: Event) -> Any: ...


class ListSink:
    """Keeps emitted events in memory (tests); thread-safe."""

    def __init__(self):
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def emit(self, event: Event) -> bool:
        with self._lock:
            self.events.append(event)
        return True


@dataclass
class Turn:
    """One policy turn, as the user saw it (the ledger tests and the summary read)."""

    request_id: str
    user_id: str
    session_id: str
    task_id: str
    turn: int
    time: datetime
    outcome: str                 # correct | wrong | question | broken | error
    needless_question: bool = False
    arm: str = ""
    policy_version: str = ""
    applied: bool | None = None  # None: no edit shown
    reverted: bool | None = None
    followup: str = ""           # "" | dissatisfied | needless | satisfied | clarification | retry


class Stats:
    """Counters shared by every user (thread-safe), plus the ledger of turns when kept."""

    def __init__(self, keep_ledger: bool = True):
        self.c: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.arms: Counter[str] = Counter()
        self.versions: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.ledger: list[Turn] | None = [] if keep_ledger else None
        self.latest: datetime | None = None
        self.last_error = ""
        self.lock = threading.Lock()

    def add(self, **counts: int) -> None:
        with self.lock:
            self.c.update(counts)

    def event(self, e: Event) -> None:
        with self.lock:
            self.events[e.event_type] += 1
            if self.latest is None or e.event_time > self.latest:
                self.latest = e.event_time

    def turn(self, t: Turn) -> None:
        with self.lock:
            self.c["requests"] += 1
            self.outcomes[t.outcome] += 1
            if t.arm:
                self.arms[t.arm] += 1
            if t.policy_version:
                self.versions[t.policy_version] += 1
            if self.ledger is not None:
                self.ledger.append(t)

    def fail(self, kind: str) -> None:
        with self.lock:
            self.failures[kind] += 1


def hunks(before: str, after: str) -> list[Hunk]:
    """The changed regions of a file: old start/count and the fingerprints of the lines inserted or changed."""
    a, b = before.splitlines(), after.splitlines()
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            out.append(Hunk(old_start=i1, old_count=i2 - i1, new_fingerprints=line_fingerprints("\n".join(b[j1:j2]))))
    return out


@dataclass
class Conversation:
    task: Task
    session_id: str
    rng: random.Random
    messages: list[dict[str, str]]
    clarified: bool = False
    turns: int = 0


@dataclass
class PendingEdit:
    conv: Conversation
    path: str
    before: str
    after: str
    correct: bool
    turn: Turn
    reverted: bool = False


@dataclass(order=True)
class _Action:
    time: datetime
    seq: int
    fn: Callable = field(compare=False)
    args: tuple = field(compare=False, default=())
    new_task: bool = field(compare=False, default=False)   # starts a task or session: dropped past the deadline


class SimUser(BackgroundWork):
    def __init__(self, index: int, cfg: SimulatorConfig, run: str, clock: SimClock, policy: Policy,
                 sink: EventSink, stats: Stats):
        self.index, self.cfg, self.run, self.clock = index, cfg, run, clock
        self.policy, self.sink, self.stats = policy, sink, stats
        seed = cfg.seed
        self.user_id = f"s{seed}-u{index}"
        self.org = cfg.org(index % cfg.orgs)
        self.ws: Workspace = make_workspace(seed, self.org, index // cfg.orgs, cfg.files_per_workspace)
        self.workspace_id = f"s{seed}-{self.ws.workspace_id}"
        self.rng = random.Random(f"user:{seed}:{index}")
        self.privacy = self.rng.random() < cfg.privacy_rate
        self.text: dict[str, str] = {p: self.ws.text(p) for p in self.ws.files}
        self.locked: dict[str, datetime] = {}
        self.agenda: list[_Action] = []
        self._seq = self._events = self._tasks = self._sessions = 0
        self._session_id = ""
        self._tasks_left = 0

    # -- scheduling -------------------------------------------------------------------------------------------

    def at(self, t: datetime, fn: Callable, *args, new_task: bool = False) -> None:
        self._seq += 1
        heapq.heappush(self.agenda, _Action(t, self._seq, fn, args, new_task))

    def start(self) -> None:
        """Schedule the first session (users start spread over one session gap, or `start_spread_s`)."""
        spread = self.cfg.start_spread_s or self.cfg.session_gap_s[1]
        self.at(self.clock.start + timedelta(seconds=self.rng.uniform(0, spread)), self._start_session,
                new_task=True)

    def next_time(self, deadline: datetime | None = None) -> datetime | None:
        """When the next action is due (None: nothing left). Tasks and sessions due past `deadline` are dropped;
        the reactions to earlier requests still run (the run drains)."""
        while self.agenda and self.agenda[0].new_task and deadline is not None and self.agenda[0].time > deadline:
            heapq.heappop(self.agenda)
        return self.agenda[0].time if self.agenda else None

    def run_next(self) -> None:
        """Run the next action (the runner has brought the clock to its time)."""
        a = heapq.heappop(self.agenda)
        a.fn(a.time, *a.args)

    def _delay(self, rng: random.Random, bounds: tuple[float, float]) -> timedelta:
        return timedelta(seconds=rng.uniform(*bounds))

    # -- events -----------------------------------------------------------------------------------------------

    def _emit(self, cls: type[Event], t: datetime, session_id: str, **fields) -> Event:
        self._events += 1
        event = cls(event_id=str(uuid.uuid5(NAMESPACE, f"{self.run}:{self.user_id}:{self._events}")),
                    event_time=t, user_id=self.user_id, org_id=self.org.org_id, workspace_id=self.workspace_id,
                    session_id=session_id, privacy_mode=self.privacy, client_version=CLIENT_VERSION, **fields)
        self.stats.event(event)
        self.sink.emit(event)
        return event

    def _snapshot(self, t: datetime, session_id: str, path: str, trigger: SnapshotTrigger) -> None:
        self._emit(CodebaseSnapshot, t, session_id, file_id=file_id(path), trigger=trigger,
                   line_fingerprints=line_fingerprints(self.text[path]))

    def _followup(self, t: datetime, conv: Conversation, turn: Turn, kind: str, text: str) -> None:
        """The user sends `text` at `t` (scheduled: every event is emitted at its own time)."""
        turn.followup = kind
        self.at(t, self._send_followup, conv.session_id, turn.request_id, kind, text)

    def _send_followup(self, t: datetime, session_id: str, request_id: str, kind: str, text: str) -> None:
        self.stats.add(**{f"followups_{kind}": 1})
        self._emit(FollowupMessage, t, session_id, previous_request_id=request_id, text="" if self.privacy else text)

    # -- sessions and tasks -----------------------------------------------------------------------------------

    def _start_session(self, t: datetime) -> None:
        self._sessions += 1
        self._session_id = f"{self.user_id}-{self.run}-{self._sessions}"
        p = 1.0 / self.cfg.tasks_per_session
        n = 1
        while self.rng.random() > p and n < 10_000:
            n += 1
        self._tasks_left = n
        self.stats.add(sessions=1)
        self._next_task(t)

    def _next_task(self, t: datetime) -> None:
        if self._tasks_left <= 0:
            self.at(t + self._delay(self.rng, self.cfg.session_gap_s), self._start_session, new_task=True)
            return
        free = {p: f for p, f in self.ws.files.items() if p not in self.locked}
        if not free:  # every file has an edit waiting for its snapshot: come back when one is free
            self.at(min(self.locked.values()) + timedelta(seconds=1), self._next_task, new_task=True)
            return
        self._tasks_left -= 1
        self._tasks += 1
        if self.cfg.background_rate and self.rng.random() < self.cfg.background_rate:
            self._start_background(t)           # the agent works on it; the user goes on
            self.at(t + self._delay(self.rng, self.cfg.think_s), self._next_task, new_task=True)
            return
        view = Workspace(self.ws.workspace_id, self.org, free)
        task = make_task(self.rng, view, f"{self.user_id}-t{self._tasks}", ambiguous_rate=self.cfg.ambiguous_rate)
        conv = Conversation(task, self._session_id, random.Random(f"task:{self.cfg.seed}:{self.index}:{self._tasks}"),
                            task.messages())
        self._ask(t, conv)

    def _end(self, t: datetime, conv: Conversation) -> None:
        self.at(t + self._delay(self.rng, self.cfg.think_s), self._next_task, new_task=True)

    # -- one policy turn --------------------------------------------------------------------------------------

    def _now(self, t: datetime) -> datetime:
        """When a request planned for `t` happens: then, or now when behind schedule (a slow call, real time)."""
        return t if self.clock.deterministic else max(t, self.clock.now())

    def _metadata(self, t: datetime, session_id: str, **extra) -> dict:
        return {"session_id": session_id, "workspace_id": self.workspace_id, "org_id": self.org.org_id,
                "event_time": t.isoformat(), "privacy_mode": self.privacy, "client_version": CLIENT_VERSION, **extra}

    def _call(self, t: datetime, request: PolicyRequest, on_reply: Callable, *args) -> bool:
        """Ask the policy at `t`; `on_reply(reply time, *args, reply, t)` runs after its latency. False (counted as
        a policy error) when the call failed."""
        w0 = self.clock.wall()
        try:
            reply = self.policy.respond(request)
        except PolicyError as e:
            self.stats.fail("policy_error")
            self.stats.add(errors=1)
            self.stats.last_error = str(e)
            return False
        w1 = self.clock.wall()
        latency = self.clock.latency(None if w0 is None or w1 is None else w1 - w0)
        self.at(t + latency, on_reply, *args, reply, t)
        return True

    def _ask(self, t: datetime, conv: Conversation) -> None:
        t = self._now(t)
        conv.turns += 1
        request = PolicyRequest(list(conv.messages), self.user_id, self._metadata(t, conv.session_id), conv.task)
        if not self._call(t, request, self._on_reply, conv):
            self.stats.turn(Turn("", self.user_id, conv.session_id, conv.task.task_id, conv.turns, t, "error"))
            self._end(t, conv)

    def _on_reply(self, t: datetime, conv: Conversation, reply: PolicyReply, asked: datetime) -> None:
        task = conv.task
        g = grade(task, reply.parsed, clarified=conv.clarified)
        turn = Turn(reply.request_id, self.user_id, conv.session_id, task.task_id, conv.turns, asked, g.outcome,
                    g.needless_question, reply.arm, reply.policy_version)
        self.stats.turn(turn)
        self._tool_results(t, conv, reply)
        if reply.parsed.broken:
            self.stats.add(broken_calls=reply.parsed.broken)
        rng = conv.rng
        if g.outcome == "question":
            self.stats.add(questions=1, needless_questions=int(g.needless_question))
            if not g.needless_question:
                if rng.random() < self.cfg.p_answer_question:
                    self._next_turn(t, conv, turn, reply, "clarification", task.clarification, clarify=True)
                else:
                    self._end(t, conv)
            elif rng.random() < self.cfg.p_complain_needless:
                self._next_turn(t, conv, turn, reply, "needless", followups.pick(rng, followups.NEEDLESS))
            else:
                self._next_turn(t, conv, turn, reply, "retry", followups.pick(rng, followups.RETRY,
                                                                                request=task.request))
        elif g.outcome in ("correct", "wrong") and g.new_text is not None:
            path = task.path
            self.stats.add(edits_shown=1)
            self._emit(SuggestionShown, t, conv.session_id, request_id=reply.request_id, file_id=file_id(path),
                       hunks=hunks(self.text[path], g.new_text))
            self.at(t + self._delay(rng, self.cfg.apply_delay_s), self._decide, conv, reply, turn, g)
        else:  # broken, or no edit at all (an answer where an edit was asked for)
            broken = g.outcome == "broken"
            p = self.cfg.p_complain_broken if broken else self.cfg.p_complain_wrong
            if rng.random() < p:
                text = followups.pick(rng, followups.BROKEN if broken else followups.WRONG)
                if rng.random() < self.cfg.p_retry:
                    self._next_turn(t, conv, turn, reply, "dissatisfied", text)
                    return
                self._followup(t + self._delay(rng, self.cfg.followup_delay_s), conv, turn, "dissatisfied", text)
            self._end(t, conv)

    def _tool_results(self, t: datetime, conv: Conversation, reply: PolicyReply) -> None:
        """Execute the reply's valid calls (edits against the current file) and report each."""
        text = self.text.get(conv.task.path, "")
        for i, call in enumerate(reply.parsed.calls[:256]):
            error = ""
            if call.name == "edit_file":
                if call.arguments["path"] != conv.task.path:
                    error = f"no such file {call.arguments['path']!r}"[:4096]
                else:
                    try:
                        text = apply_edit(text, call.arguments["old"], call.arguments["new"])
                    except EditError as e:
                        error = str(e)
            if error:
                self.stats.add(broken_calls=1)
            self._emit(ToolCallResult, t, conv.session_id, request_id=reply.request_id, tool=call.name[:128],
                       call_index=i, ok=not error, error_kind=ToolErrorKind.tool_error if error else ToolErrorKind.none,
                       error_message="" if self.privacy else error)

    def _next_turn(self, t: datetime, conv: Conversation, turn: Turn, reply: PolicyReply, kind: str, text: str,
                   clarify: bool = False) -> None:
        """The user's message is a follow-up of `turn` and, turns permitting, the conversation's next turn."""
        when = t + self._delay(conv.rng, self.cfg.followup_delay_s)
        self._followup(when, conv, turn, kind, text)
        if conv.turns >= self.cfg.max_turns:
            self._end(when, conv)
            return
        if clarify and conv.turns == 1:
            conv.messages = conv.task.clarified_messages(reply.text)
        else:
            conv.messages = conv.messages + [{"role": "assistant", "content": reply.text},
                                             {"role": "user", "content": text}]
        conv.clarified = conv.clarified or clarify
        self.at(when + timedelta(seconds=1), self._ask, conv)

    # -- the fate of a shown edit -----------------------------------------------------------------------------

    def _decide(self, t: datetime, conv: Conversation, reply: PolicyReply, turn: Turn, g: Grade) -> None:
        rng, cfg, path = conv.rng, self.cfg, conv.task.path
        correct = g.correct
        apply = rng.random() < (cfg.p_apply_correct if correct else cfg.p_apply_wrong)
        turn.applied = apply
        fid = file_id(path)
        if apply:
            self.stats.add(edits_applied=1)
            pending = PendingEdit(conv, path, self.text[path], g.new_text, correct, turn)
            self._emit(EditApplied, t, conv.session_id, request_id=reply.request_id, file_id=fid,
                       hunks=hunks(self.text[path], g.new_text))
            self.text[path] = g.new_text
            self.locked[path] = t + timedelta(seconds=cfg.snapshot_delay_s)
            self.at(t + timedelta(seconds=rng.uniform(1.0, 10.0)), self._save, conv.session_id, path)
            revert = rng.random() < ((1 - cfg.p_keep_correct) if correct else cfg.p_revert_wrong)
            turn.reverted = revert
            if revert:
                self.at(t + self._delay(rng, cfg.revert_delay_s), self._revert, pending)
            self.at(t + timedelta(seconds=cfg.snapshot_delay_s), self._horizon, pending)
        else:
            self.stats.add(edits_rejected=1)
            self._emit(EditRejected, t, conv.session_id, request_id=reply.request_id, file_id=fid)
        retry = False
        if correct:
            if rng.random() < cfg.p_complain_correct:
                self._followup(t + self._delay(rng, cfg.followup_delay_s), conv, turn, "dissatisfied",
                               followups.pick(rng, followups.WRONG))
            elif rng.random() < cfg.p_thanks_correct:
                self._followup(t + self._delay(rng, cfg.followup_delay_s), conv, turn, "satisfied",
                               followups.pick(rng, followups.SATISFIED))
        elif rng.random() < cfg.p_complain_wrong:
            text = followups.pick(rng, followups.WRONG)
            if not apply and rng.random() < cfg.p_retry:  # the file is unchanged: the policy may try again
                self._next_turn(t, conv, turn, reply, "dissatisfied", text)
                retry = True
            else:
                self._followup(t + self._delay(rng, cfg.followup_delay_s), conv, turn, "dissatisfied", text)
        if not retry:
            self._end(t, conv)

    def _save(self, t: datetime, session_id: str, path: str) -> None:
        self._snapshot(t, session_id, path, SnapshotTrigger.save)

    def _revert(self, t: datetime, pending: PendingEdit) -> None:
        pending.reverted = True
        self.stats.add(edits_reverted=1)
        self.text[pending.path] = pending.before
        self._snapshot(t, pending.conv.session_id, pending.path, SnapshotTrigger.save)

    def _horizon(self, t: datetime, pending: PendingEdit) -> None:
        """The periodic snapshot that decides the edit's persistence; then the file's fate becomes the workspace's
        state and the file is free again."""
        path, conv = pending.path, pending.conv
        self._snapshot(t, conv.session_id, path, SnapshotTrigger.periodic)
        if pending.reverted:
            self.locked.pop(path, None)
            return
        self.stats.add(edits_kept=1)
        try:
            apply_task(self.ws, dataclasses.replace(conv.task, after=self.text[path]))
        except ValueError:  # a kept edit outside the generator's grammar: the user rewrites it later
            when = t + timedelta(seconds=max(self.cfg.cleanup_delay_s - self.cfg.snapshot_delay_s, 1.0))
            self.locked[path] = when
            self.at(when, self._cleanup, conv.session_id, path)
            return
        self.locked.pop(path, None)

    def _cleanup(self, t: datetime, session_id: str, path: str) -> None:
        self.text[path] = self.ws.text(path)
        self.locked.pop(path, None)
        self._snapshot(t, session_id, path, SnapshotTrigger.save)
