"""The agent harness: drive an OpenAI-compatible endpoint through a task, turn by turn, and grade the result.

    endpoint = OpenAIPolicy("http://127.0.0.1:18300/v1")          # any OpenAI-compatible chat endpoint
    episodes = run_suite(tasks, endpoint, arm="candidate", samples=4, seed=0, workers=8)

One episode = one task, one sample k, one arm, in a fresh copy of the task's repository:

  1. the conversation opens with the task's system prompt (`system.md`, if any) and one user message in the
     training format: the focus file, fenced, then the request (`path\\n```\\n{content}```\\n{prompt}`);
  2. each model response is parsed with the protocol's strict parser (serving's verdict when the endpoint gives
     one). Valid tool calls run in the sandbox (`evals.tools.ToolExecutor`, the task suite hidden) and their
     results go back as `tool` messages; broken calls are counted and the parser's reason goes back as the
     user's message; a question is answered with the task's `clarification`; a plain answer ends the episode,
     and so does the first applied edit when the task says `end_on_edit` (the inline-edit flow);
  3. at `max_turns`, the wall budget, or the end, the hidden tests grade the work dir (`evals.tasks.grade`).

Sampling seeds derive from (seed, task id, k, turn), so the candidate and the champion get the same seed for the
same turn of the same sample: the gate's pairs differ by the checkpoint, not by luck of the draw.

Infrastructure failures (the endpoint refused the connection, answered 5xx, the sandbox did not start) mark the
episode `infra_error` and say nothing about the model; the gate drops those pairs. A 400 for a conversation that
outgrew the model's context ends the episode as the model's failure.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable

from evals.records import Episode
from evals.tasks.grade import grade, prepare_workdir
from evals.tasks.spec import Task
from evals.tools import ToolExecutor
from codetasks.policy import Policy, PolicyError, PolicyReply, PolicyRequest, response_text
from schemas.events import ResponseKind
from schemas.tool_protocol import to_openai_tool_calls

NO_CLARIFICATION = "No more details, sorry: make the change you think is right."
BROKEN_CALL_REPLY = "Your tool call could not be used: {why}. Write it again."


def turn_seed(seed: int, task_id: str, sample: int, turn: int) -> int:
    """The sampling seed of one turn: equal for both arms, different across tasks, samples and turns."""
    digest = hashlib.sha256(f"eval:{seed}:{task_id}:{sample}:{turn}".encode()).digest()
    return int.from_bytes(digest[:7], "big")


def first_message(task: Task, workdir: Path) -> str:
    """The user's opening message: the focus file (as the repository has it) and the request."""
    if not task.spec.focus_file:
        return task.prompt
    content = (workdir / task.spec.focus_file).read_text(encoding="utf-8", errors="replace")
    return f"{task.spec.focus_file}\n```\n{content}```\n{task.prompt}"


class _Episode:
    """The mutable state of one running episode."""

    def __init__(self, task: Task, arm: str, sample: int, seed: int, endpoint: Policy, suite_dirs: tuple[str, ...],
                 workdir: Path):
        self.task, self.endpoint, self.seed, self.workdir = task, endpoint, seed, workdir
        self.rec = Episode(task_id=task.id, sample=sample, arm=arm, category=task.spec.category,
                           cluster=task.spec.cluster, ambiguous=task.spec.ambiguous)
        self.tools = ToolExecutor(workdir, task.spec.limits.limits(), hide=suite_dirs)
        self.messages: list[dict[str, Any]] = []
        self.deadline = time.monotonic() + task.spec.episode_timeout_seconds

    def say(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.rec.transcript.append(message)

    def ask(self, turn: int) -> PolicyReply | None:
        """One model response, or None when the episode must stop (the reason is recorded)."""
        t0 = time.perf_counter()
        meta = {"session_id": f"eval-{self.task.id}-{self.rec.sample}", "workspace_id": f"eval-{self.task.id}",
                "org_id": self.task.spec.cluster or "eval", "client_version": "rtrl-eval/0.1"}
        try:
            reply = self.endpoint.respond(PolicyRequest(
                list(self.messages), user=f"eval-{self.rec.arm}-{self.task.id}-{self.rec.sample}", metadata=meta,
                seed=turn_seed(self.seed, self.task.id, self.rec.sample, turn)))
        except PolicyError as e:
            if e.status is not None and 400 <= e.status < 500 and e.status not in (401, 403, 404, 408, 429):
                self.rec.notes["stopped"] = f"the endpoint refused the conversation: {e}"[:2000]
            else:
                self.rec.infra_error = f"endpoint: {e}"[:2000]
            return None
        self.rec.latency_ms += (time.perf_counter() - t0) * 1000
        self.rec.turns += 1
        self.rec.completion_tokens += reply.completion_tokens
        self.rec.prompt_tokens += reply.prompt_tokens
        self.rec.policy_version = self.rec.policy_version or reply.policy_version
        return reply

    def act(self, reply: PolicyReply) -> bool:
        """Carry out a response; True when the conversation goes on."""
        parsed = reply.parsed
        self.rec.tool_calls += len(parsed.records)
        self.rec.broken_tool_calls += parsed.broken
        if parsed.calls:
            tool_calls = to_openai_tool_calls(parsed.calls, f"{self.rec.turns}")
            self.say({"role": "assistant", "content": parsed.content or None, "tool_calls": tool_calls})
            edited = False
            for call, wire in zip(parsed.calls, tool_calls):
                result = self.tools.execute(call)
                if result.infra_error:
                    self.rec.infra_error = f"sandbox: {result.infra_error}"[:2000]
                    return False
                self.rec.broken_tool_calls += int(result.failed)
                edited = edited or result.edited
                self.say({"role": "tool", "tool_call_id": wire["id"], "content": result.text})
            self.rec.edited = self.rec.edited or edited
            return not (edited and self.task.spec.end_on_edit)
        self.say({"role": "assistant", "content": reply.text})
        if parsed.broken:
            why = "; ".join(r.error for r in parsed.records if r.error) or "it did not parse"
            self.say({"role": "user", "content": BROKEN_CALL_REPLY.format(why=why[:500])})
            return True
        if parsed.kind is ResponseKind.question:
            self.rec.asked = True
            self.say({"role": "user", "content": self.task.spec.clarification or NO_CLARIFICATION})
            return True
        return False  # a plain answer: the agent is done

    def run(self) -> Episode:
        if self.task.system:
            self.say({"role": "system", "content": self.task.system})
        self.say({"role": "user", "content": first_message(self.task, self.workdir)})
        for turn in range(self.task.spec.max_turns):
            if time.monotonic() > self.deadline:
                self.rec.notes["stopped"] = f"episode budget of {self.task.spec.episode_timeout_seconds:g} s spent"
                break
            reply = self.ask(turn)
            if reply is None or not self.act(reply):
                break
        if self.rec.infra_error is None:
            g = grade(self.task, self.workdir)
            if g.infra_error:
                self.rec.infra_error = f"grading: {g.infra_error}"[:2000]
            else:
                self.rec.resolved = g.resolved
                self.rec.notes["tests"] = g.outcomes
                failed = {k: v[:500] for k, v in g.messages.items()}
                if failed:
                    self.rec.notes["failures"] = failed
        return self.rec


def run_episode(task: Task, endpoint: Policy, *, arm: str, sample: int, seed: int = 0,
                suite_dirs: Iterable[str | Path] = (), work_root: str | Path | None = None) -> Episode:
    """Run one episode in a fresh copy of the task's repository (removed afterwards). `suite_dirs` are hidden
    from the sandbox (the folders holding hidden tests and reference solutions; the task's own folder always)."""
    hide = tuple(dict.fromkeys([str(task.dir), *map(str, suite_dirs)]))
    tmp = Path(tempfile.mkdtemp(prefix=f"rtrl-eval-{task.id}-", dir=work_root))
    t0 = time.monotonic()
    try:
        ep = _Episode(task, arm, sample, seed, endpoint, hide, prepare_workdir(task, tmp / "work"))
        try:
            rec = ep.run()
        except Exception as e:  # noqa: BLE001 -- a harness bug must not sink the suite; it is not the model's fault
            rec = ep.rec
            rec.infra_error = f"harness: {type(e).__name__}: {e}"[:2000]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rec.seconds = time.monotonic() - t0
    return rec


def run_suite(tasks: Iterable[Task], endpoint: Policy, *, arm: str, samples: int, seed: int = 0, workers: int = 4,
              suite_dirs: Iterable[str | Path] = (), progress: Callable[[int, int, Episode], None] | None = None,
              work_root: str | Path | None = None) -> list[Episode]:
    """Every (task, sample) episode for one arm, `workers` at a time (the endpoint batches them), in task/sample
    order. `progress(done, total, episode)` is called as each finishes."""
    jobs = [(t, k) for t in tasks for k in range(samples)]
    dirs = tuple(map(str, suite_dirs))
    out: dict[tuple[str, int], Episode] = {}
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=f"eval-{arm}") as pool:
        futures = [pool.submit(run_episode, t, endpoint, arm=arm, sample=k, seed=seed, suite_dirs=dirs,
                               work_root=work_root) for t, k in jobs]
        for f in as_completed(futures):
            ep = f.result()
            with lock:
                out[(ep.task_id, ep.sample)] = ep
                if progress is not None:
                    progress(len(out), len(jobs), ep)
    return [out[(t.id, k)] for t, k in jobs]
