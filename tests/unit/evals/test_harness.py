"""The agent harness against a scripted endpoint (the real sandbox, real task folders, real grading): the opening
message, tool results fed back, clarifications answered, broken calls counted, infrastructure failures told apart
from the model's, the same seeds for both arms."""

from __future__ import annotations

import pytest

import json
import threading

from evals.harness import BROKEN_CALL_REPLY, NO_CLARIFICATION, first_message, run_episode, run_suite, turn_seed
from evals.tasks import load_task
from evals.tasks.generate import generate_suite
from codetasks.policy import PolicyError, PolicyReply, PolicyRequest
from schemas.tool_protocol import ToolCall, parse_response
from tests.unit.evals.task_folders import CALC, TOML, needs_bwrap, write_task

pytestmark = needs_bwrap

FIX = ToolCall("edit_file", {"path": "calc.py", "old": "def add(a, b):\n    return a - b",
                             "new": "def add(a, b):\n    return a + b"}).text()


class Scripted:
    """Answers each request with the next text of its script (per user), recording what it was sent."""

    def __init__(self, *texts: str, error: PolicyError | None = None):
        self.texts, self.error = list(texts), error
        self.requests: list[PolicyRequest] = []
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def respond(self, request: PolicyRequest) -> PolicyReply:
        with self._lock:
            self.requests.append(request)
            i = self._next.get(request.user, 0)
            self._next[request.user] = i + 1
        if self.error is not None:
            raise self.error
        text = self.texts[min(i, len(self.texts) - 1)]
        return PolicyReply(request_id=f"r{i}", parsed=parse_response(text), text=text, policy_version="9",
                           completion_tokens=len(text) // 4, prompt_tokens=100)


def test_opening_message_is_the_focus_file_then_the_request(user_task_dir):
    task = load_task(user_task_dir)
    assert first_message(task, task.repo_dir) == f"calc.py\n```\n{CALC}```\nadd is broken"


@pytest.mark.integration
def test_an_edit_then_a_plain_answer_resolves_the_task(user_task_dir):
    task = load_task(user_task_dir)
    endpoint = Scripted(FIX, "Done: add now adds.")
    ep = run_episode(task, endpoint, arm="candidate", sample=0)
    assert ep.valid and ep.resolved and ep.edited and not ep.asked
    assert (ep.turns, ep.tool_calls, ep.broken_tool_calls, ep.policy_version) == (2, 1, 0, "9")
    second = endpoint.requests[1].messages
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"][0]["function"]["name"] == "edit_file"
    assert second[-1] == {"role": "tool", "tool_call_id": second[-2]["tool_calls"][0]["id"],
                          "content": "edited calc.py"}
    assert ep.notes["tests"]["tests/test_calc.py::test_add_adds"] == "passed"


@pytest.mark.integration
def test_a_plain_answer_without_an_edit_is_unresolved(user_task_dir):
    ep = run_episode(load_task(user_task_dir), Scripted("Looks fine to me."), arm="candidate", sample=0)
    assert ep.valid and not ep.resolved and not ep.edited and ep.turns == 1
    assert "failures" in ep.notes


@pytest.mark.integration
def test_end_on_edit_stops_at_the_first_applied_edit(tmp_path):
    d = write_task(tmp_path / "suite", toml=TOML + "end_on_edit = true\n")
    endpoint = Scripted(FIX, "never asked")
    ep = run_episode(load_task(d), endpoint, arm="candidate", sample=0)
    assert ep.resolved and ep.turns == 1 and len(endpoint.requests) == 1


@pytest.mark.integration
def test_a_question_gets_the_tasks_clarification_and_counts_as_asked(tmp_path):
    d = write_task(tmp_path / "suite", toml=TOML + 'ambiguous = true\nclarification = "make add return a + b"\n')
    endpoint = Scripted("Which function do you mean?", FIX, "Done.")
    ep = run_episode(load_task(d), endpoint, arm="candidate", sample=0)
    assert ep.asked and ep.resolved and ep.ambiguous and not ep.needless_question
    assert endpoint.requests[1].messages[-1] == {"role": "user", "content": "make add return a + b"}


def test_a_question_without_a_clarification_gets_the_stock_answer(user_task_dir):
    endpoint = Scripted("Which function?", "ok")
    ep = run_episode(load_task(user_task_dir), endpoint, arm="candidate", sample=0)
    assert ep.asked and endpoint.requests[1].messages[-1]["content"] == NO_CLARIFICATION
    assert not ep.ambiguous and ep.needless_question      # the task was clear: the question was needless


@pytest.mark.integration
def test_broken_calls_are_counted_and_the_reason_is_sent_back(user_task_dir):
    malformed = '<tool_call>\n{"name": "edit_file", "arguments": {"path": "calc.py"\n</tool_call>'
    missing = ToolCall("edit_file", {"path": "calc.py", "old": "not in the file", "new": "x"}).text()
    endpoint = Scripted(malformed, missing, FIX, "Done.")
    ep = run_episode(load_task(user_task_dir), endpoint, arm="candidate", sample=0)
    assert ep.resolved and ep.broken and ep.broken_tool_calls == 2 and ep.tool_calls == 3
    reply = endpoint.requests[1].messages[-1]
    assert reply["role"] == "user" and reply["content"].startswith(BROKEN_CALL_REPLY.split("{")[0])
    assert "not valid JSON" in reply["content"]
    assert endpoint.requests[2].messages[-1]["content"].startswith("error: edit_file calc.py")


@pytest.mark.integration
def test_max_turns_bounds_the_episode(tmp_path):
    d = write_task(tmp_path / "suite", toml=TOML + "max_turns = 3\n")
    endpoint = Scripted(ToolCall("read_file", {"path": "calc.py"}).text())
    ep = run_episode(load_task(d), endpoint, arm="candidate", sample=0)
    assert ep.turns == 3 and len(endpoint.requests) == 3 and not ep.resolved and ep.valid


def test_an_unreachable_endpoint_is_an_infrastructure_failure(user_task_dir):
    ep = run_episode(load_task(user_task_dir), Scripted(error=PolicyError("APIConnectionError: refused")),
                     arm="candidate", sample=0)
    assert not ep.valid and ep.infra_error.startswith("endpoint:") and not ep.resolved


@pytest.mark.integration
def test_a_conversation_refused_with_400_is_the_models_failure(user_task_dir):
    ep = run_episode(load_task(user_task_dir), Scripted(error=PolicyError("BadRequestError: too long", 400)),
                     arm="candidate", sample=0)
    assert ep.valid and not ep.resolved and "refused" in ep.notes["stopped"]


@pytest.mark.integration
def test_commands_cannot_read_the_hidden_tests(user_task_dir):
    task = load_task(user_task_dir)
    peek = ToolCall("run_terminal", {"command": f"cat {task.dir}/tests/test_calc.py; ls {task.dir}"}).text()
    endpoint = Scripted(peek, "done")
    run_episode(task, endpoint, arm="candidate", sample=0)
    shown = endpoint.requests[1].messages[-1]["content"]
    assert "def test_add_adds" not in shown and "task.toml" not in shown


def test_both_arms_get_the_same_seeds_and_samples_differ(tmp_path):
    tasks = generate_suite(tmp_path / "suite", 3, seed=1)
    seen = {}
    for arm in ("candidate", "champion"):
        endpoint = Scripted("no edit")
        episodes = run_suite(tasks, endpoint, arm=arm, samples=2, seed=5, workers=3)
        assert [(e.task_id, e.sample, e.arm) for e in episodes] == [(t.id, k, arm) for t in tasks for k in (0, 1)]
        seen[arm] = sorted((r.user.split("-", 2)[2], r.seed) for r in endpoint.requests)
    assert [s for _, s in seen["candidate"]] == [s for _, s in seen["champion"]]
    assert len({s for _, s in seen["candidate"]}) == 6
    assert turn_seed(5, tasks[0].id, 0, 0) != turn_seed(6, tasks[0].id, 0, 0)


def test_generated_tasks_open_with_the_orgs_system_prompt_and_end_on_edit(tmp_path):
    task = generate_suite(tmp_path / "suite", 1, seed=2)[0]
    endpoint = Scripted("Which one?")
    ep = run_episode(task, endpoint, arm="candidate", sample=0)
    first = endpoint.requests[0].messages
    assert task.spec.end_on_edit and first[0] == {"role": "system", "content": task.system}
    assert task.system.startswith(f"org {task.spec.cluster}:")
    assert first[1]["content"].startswith(f"{task.spec.focus_file}\n```\n")
    assert json.loads(json.dumps(ep.to_dict()))["transcript"][0]["role"] == "system"
