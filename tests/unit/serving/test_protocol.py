"""The gateway's request validation and response shaping, as pure functions."""

import json
import math
from datetime import datetime, timezone

import pytest

from schemas.events import ResponseKind, ToolCallStatus
from schemas.tool_protocol import ToolCall, parse_response
from serving.protocol import (Caller, ChatRequest, Generation, RequestError, Sampling, Served, TimeBounds,
                              behaviour_logprob, build_response, build_trajectories, fit_max_tokens, parse_request)

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
EDIT = ToolCall("edit_file", {"path": "app/util.py", "old": "RETRIES = 3", "new": "RETRIES = 5"})
READ = ToolCall("read_file", {"path": "app/util.py"})


def body(**kw) -> dict:
    base = {"model": "rtrl-policy", "user": "user-1", "messages": [{"role": "user", "content": "raise the retries"}]}
    base.update(kw)
    return base


def parse(b, **kw) -> ChatRequest:
    return parse_request(b, default_max_tokens=192, max_model_len=1024, now=NOW, **kw)


# -- validation ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("b, param, words", [
    (body(stream="yes"), "stream", "must be a boolean"),
    (body(stream=True, stream_options=[1]), "stream_options", "include_usage"),
    ({k: v for k, v in body().items() if k != "user"}, "user", "names no user; send `user`"),
    (body(user=""), "user", "non-empty string"),
    (body(user=7), "user", "non-empty string"),
    (body(user="u" * 129), "user", "at most 128"),
    (body(messages=[]), "messages", "non-empty list"),
    (body(messages="hi"), "messages", "non-empty list"),
    (body(messages=["hi"]), "messages[0]", "must be an object"),
    (body(messages=[{"role": "wizard", "content": "x"}]), "messages", "unknown chat role 'wizard'"),
    (body(messages=[{"role": "user", "content": 5}]), "messages[0].content", "string or a list of parts"),
    (body(n=0), "n", "in [1, 16]"),
    (body(n=17), "n", "in [1, 16]"),
    (body(top_logprobs=21), "top_logprobs", "in [0, 20]"),
    (body(logprobs="yes"), "logprobs", "boolean"),
    (body(temperature=2.5), "temperature", "in [0, 2]"),
    (body(temperature="hot"), "temperature", "must be a number"),
    (body(top_p=0), "top_p", "in (0, 1]"),
    (body(stop=["a", "b", "c", "d", "e"]), "stop", "at most 4"),
    (body(stop=[""]), "stop", "non-empty"),
    (body(tools={"name": "x"}), "tools", "must be a list"),
    (body(tools=[{"type": "function", "function": {"name": "bad name!"}}]), "tools[0].function.name", "letters"),
    (body(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]),
     "tools[0].function.parameters", "not a valid JSON Schema"),
    (body(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice={"type": "function",
                                                                              "function": {"name": "g"}}),
     "tool_choice", "do not offer"),
    (body(tool_choice="required"), "tool_choice", "offers no tools"),
    (body(max_tokens=0), "max_tokens", "in [1, 1024]"),
    (body(max_tokens="10"), "max_tokens", "must be an integer"),
    (body(max_completion_tokens=5000), "max_completion_tokens", "in [1, 1024]"),
    (body(seed=-1), "seed", "in [0"),
    (body(metadata=[1]), "metadata", "must be an object"),
    (body(metadata={"session_id": ""}), "metadata.session_id", "non-empty string"),
    (body(metadata={"privacy_mode": "maybe"}), "metadata.privacy_mode", "boolean"),
    (body(metadata={"event_time": "yesterday"}), "metadata.event_time", "not an ISO 8601 time"),
    (body(metadata={"event_time": "2026-11-01T12:00:00"}), "metadata.event_time", "timezone"),
    (body(messages=[{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "read_file", "arguments": "{not json"}}]}]), "messages", "messages:"),
])
def test_bad_requests_are_400_naming_the_parameter(b, param, words):
    with pytest.raises(RequestError) as err:
        parse(b)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message
    assert err.value.body()["error"]["type"] == "invalid_request_error"


def test_a_body_that_is_not_an_object_is_refused():
    with pytest.raises(RequestError, match="JSON object"):
        parse([1, 2])


def test_defaults_without_metadata():
    r = parse(body())
    assert r.user_id == "user-1" and r.max_tokens == 192 and r.seed is None and not r.privacy_mode
    assert r.event_time == NOW and r.session_id == r.request_id and len(r.request_id) == 32
    assert (r.workspace_id, r.org_id) == ("unknown", "unknown")
    assert r.messages == [{"role": "user", "content": "raise the retries"}]


def test_metadata_ids_privacy_and_simulated_event_time_are_taken():
    r = parse(body(max_tokens=50, max_completion_tokens=40, seed=9, metadata={
        "session_id": "s1", "workspace_id": "w1", "org_id": "o1", "request_id": "req-42", "privacy_mode": "true",
        "event_time": "2026-11-01T12:04:00+01:00", "client_version": "editor/2.0", "other": "ignored"}))
    assert (r.session_id, r.workspace_id, r.org_id, r.request_id) == ("s1", "w1", "o1", "req-42")
    assert r.privacy_mode is True and r.client_version == "editor/2.0"
    assert r.event_time == datetime(2026, 11, 1, 11, 4, tzinfo=timezone.utc) and not r.event_time_clamped
    assert r.max_tokens == 40 and r.seed == 9  # max_completion_tokens wins over the deprecated max_tokens
    assert parse(body(metadata={"privacy_mode": False})).privacy_mode is False


def test_assistant_tool_calls_in_the_history_become_protocol_text():
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    r = parse(body(messages=[{"role": "user", "content": "look"}, {"role": "assistant", "content": None,
                                                                   "tool_calls": [call]},
                             {"role": "tool", "tool_call_id": "c1", "content": "X = 1"}]))
    assert r.messages[1] == {"role": "assistant", "content": ToolCall("read_file", {"path": "a.py"}).text()}
    assert r.messages[2] == {"role": "tool", "content": "X = 1"}


def test_the_completion_budget_fits_the_context_window():
    assert fit_max_tokens(100, 192, 1024) == 192
    assert fit_max_tokens(1000, 192, 1024) == 24
    with pytest.raises(RequestError, match="context is 1024 tokens"):
        fit_max_tokens(1024, 10, 1024)


# -- response shaping ---------------------------------------------------------------------------------------------

def served(text: str, request: ChatRequest | None = None, finish: str = "stop") -> Served:
    n = max(1, len(text) // 4)
    gen = Generation(token_ids=list(range(3, 3 + n)), logprobs=[-0.5] * (n - 1) + [1e-9],
                     tokens=[f"t{i}" for i in range(n)], text=text, finish_reason=finish)
    return Served(request=request or parse(body()), arm="treatment", policy_version="7", model="rtrl-policy/v7",
                  prompt_token_ids=[1, 2, 3, 4], generations=[gen], parsed=[parse_response(text)],
                  sampling=Sampling(temperature=1.0), latency_ms=12.5, created=1_790_000_000)


def test_valid_tool_calls_become_openai_tool_calls_with_finish_reason_tool_calls():
    s = served(READ.text() + "\n" + EDIT.text())
    r = build_response(s)
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["read_file", "edit_file"]
    assert json.loads(calls[1]["function"]["arguments"]) == EDIT.arguments
    assert calls[0]["id"] == f"call_{s.request.request_id}_0" and calls[0]["type"] == "function"
    assert r["response_kind"] == "edit" and [x["status"] for x in r["tool_call_records"]] == ["ok", "ok"]
    assert (r["policy_version"], r["arm"], r["request_id"]) == ("7", "treatment", s.request.request_id)
    assert r["id"] == f"chatcmpl-{s.request.request_id}" and r["object"] == "chat.completion"
    assert r["model"] == "rtrl-policy/v7" and r["created"] == 1_790_000_000


def test_a_plain_answer_keeps_its_text_and_the_engine_finish_reason():
    r = build_response(served("Which file do you mean?", finish="length"))
    choice = r["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Which file do you mean?"}
    assert choice["finish_reason"] == "length" and r["response_kind"] == "question"
    assert r["tool_call_records"] == []


def test_broken_calls_answer_the_raw_text_and_list_why_valid_ones_still_go_out():
    text = READ.text() + '\n<tool_call>\n{"name": "edit_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    r = build_response(served(text))
    msg = r["choices"][0]["message"]
    assert msg["content"] == text  # what the model wrote, so the client sees the broken call
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["read_file"]
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    records = r["tool_call_records"]
    assert [x["status"] for x in records] == ["ok", "validation_error"] and "missing argument" in records[1]["error"]
    only_broken = build_response(served("<tool_call>\n{oops\n</tool_call>"))
    assert "tool_calls" not in only_broken["choices"][0]["message"]
    assert only_broken["choices"][0]["finish_reason"] == "stop"
    assert only_broken["tool_call_records"][0]["status"] == "parse_error"


def test_logprobs_content_and_usage_are_openai_shaped():
    s = served("x" * 12)
    r = build_response(s)
    content = r["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == s.generations[0].tokens
    assert [c["logprob"] for c in content] == [-0.5, -0.5, 0.0]  # rounding above 0 is clamped to 0
    assert content[0]["bytes"] == list(b"t0") and content[0]["top_logprobs"] == []
    assert r["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    assert r["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": -1}


def test_trajectory_carries_tokens_logprobs_records_and_ids():
    req = parse(body(metadata={"session_id": "s1", "workspace_id": "w1", "org_id": "o1", "request_id": "r1",
                               "event_time": "2026-11-01T10:00:00Z"}))
    text = EDIT.text() + "\n<tool_call>\n{bad\n</tool_call>"
    (t,) = build_trajectories(served(text, req))
    assert (t.request_id, t.policy_version, t.arm, t.user_id, t.session_id, t.workspace_id, t.org_id) == \
        ("r1", "7", "treatment", "user-1", "s1", "w1", "o1")
    assert t.event_time == datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
    assert t.prompt_token_ids == [1, 2, 3, 4] and t.prompt_tokens == 4
    assert len(t.completion_token_ids) == len(t.behaviour_logprobs) == t.completion_tokens
    assert all(x <= 0 for x in t.behaviour_logprobs)
    assert [r.status for r in t.tool_calls] == [ToolCallStatus.ok, ToolCallStatus.parse_error]
    assert t.response_kind is ResponseKind.edit and t.latency_ms == 12.5
    assert (t.temperature, t.top_p, t.top_k) == (1.0, 1.0, -1) and not t.privacy_mode
    assert t.group_id is None and not t.cut_short and t.task_id is None


def test_a_background_tasks_id_in_metadata_reaches_every_trajectory_of_the_request():
    req = parse(body(metadata={"task_id": "task-42", "request_id": "r9"}))
    (t,) = build_trajectories(served(EDIT.text(), req))
    assert (t.task_id, t.request_id) == ("task-42", "r9")
    with pytest.raises(RequestError, match="metadata.task_id"):
        parse(body(metadata={"task_id": ""}))


def test_privacy_mode_trajectory_has_no_content_but_keeps_counts_and_records():
    req = parse(body(metadata={"privacy_mode": True}))
    (t,) = build_trajectories(served(READ.text(), req))
    assert t.privacy_mode and t.prompt_token_ids == [] and t.completion_token_ids == [] and t.behaviour_logprobs == []
    assert t.prompt_tokens == 4 and t.completion_tokens > 0 and t.tool_calls[0].status is ToolCallStatus.ok


def test_behaviour_logprob_is_finite_and_not_positive():
    assert behaviour_logprob(1e-7) == 0.0 and behaviour_logprob(-2.5) == -2.5
    assert behaviour_logprob(float("-inf")) == -1e9 and behaviour_logprob(math.nan) == -1e9


# -- identity, tenancy and time -------------------------------------------------------------------------------------

def test_without_user_the_caller_names_the_user_and_a_keyed_org_is_the_events_org():
    r = parse({k: v for k, v in body().items() if k != "user"}, caller=Caller(user="ide-client", org="acme"))
    assert r.user_id == "ide-client" and r.org_id == "acme"
    assert parse(body(), caller=Caller(user="ide-client")).user_id == "user-1"  # the body's user decides the arm
    gateway = parse(body(metadata={"org_id": "globex"}), caller=Caller(user="proxy", org="*"))
    assert gateway.org_id == "globex"  # a gateway key writes for the org the request names


def test_an_org_other_than_the_keys_is_refused_with_403():
    with pytest.raises(RequestError) as err:
        parse(body(metadata={"org_id": "globex"}), caller=Caller(user="c", org="acme"))
    assert err.value.status == 403 and err.value.param == "metadata.org_id"
    assert parse(body(metadata={"org_id": "acme"}), caller=Caller(user="c", org="acme")).org_id == "acme"


def test_the_missing_user_message_names_the_header_that_could_name_it():
    with pytest.raises(RequestError, match="x-rtrl-user"):
        parse({k: v for k, v in body().items() if k != "user"},
              caller=Caller(user_hint="an API key or the x-rtrl-user header"))


@pytest.mark.parametrize("event_time, clamped", [
    ("2099-12-31T00:00:00Z", True), ("2026-11-01T12:06:00Z", True), ("2026-11-01T12:04:00Z", False),
    ("2026-10-20T12:00:00Z", True), ("2026-10-26T12:00:00Z", False)])
def test_an_event_time_beyond_the_skew_becomes_the_receipt_time(event_time, clamped):
    r = parse(body(metadata={"event_time": event_time}))
    assert r.event_time_clamped is clamped
    assert r.event_time == (NOW if clamped else datetime.fromisoformat(event_time))
    wide = parse(body(metadata={"event_time": "2026-10-20T12:00:00Z"}), time_bounds=TimeBounds(300, 30 * 86400))
    assert not wide.event_time_clamped


# -- sampling, groups and tools -------------------------------------------------------------------------------------

def test_sampling_settings_are_honoured_and_the_server_temperature_is_the_default():
    r = parse(body(temperature=0.2, top_p=0.9, stop="\n\n", seed=3, n=4, logprobs=True, top_logprobs=5))
    spec = r.spec(100, default_temperature=1.0)
    assert (spec.sampling.temperature, spec.sampling.top_p, spec.seed, spec.n, spec.stop, spec.top_logprobs) == \
        (0.2, 0.9, 3, 4, ("\n\n",), 5)
    plain = parse(body()).spec(100, default_temperature=0.7)
    assert (plain.sampling.temperature, plain.sampling.top_p, plain.n, plain.stop, plain.top_logprobs) == \
        (0.7, 1.0, 1, (), 0)


def test_a_group_of_samples_gives_one_trajectory_each_with_its_own_id_and_a_shared_group_id():
    req = parse(body(n=3, metadata={"request_id": "r9"}))
    one = served("fine", req)
    s = Served(request=req, arm="treatment", policy_version="7", model="m", prompt_token_ids=[1, 2],
               generations=[Generation([5 + i], [-0.1], ["x"], f"answer {i}", "stop", index=i) for i in range(3)],
               parsed=[parse_response(f"answer {i}") for i in range(3)], sampling=Sampling(1.0), latency_ms=1.0)
    ts = build_trajectories(s)
    assert [t.request_id for t in ts] == ["r9-0", "r9-1", "r9-2"] and {t.group_id for t in ts} == {"r9"}
    r = build_response(s)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2] and r["request_id"] == "r9"
    assert [c["request_id"] for c in r["choices"]] == ["r9-0", "r9-1", "r9-2"]
    assert [c["message"]["content"] for c in r["choices"]] == ["answer 0", "answer 1", "answer 2"]
    assert r["usage"]["completion_tokens"] == 3
    assert one.request.sample_id(0) == "r9-0"


CLIENT_TOOLS = [{"type": "function", "function": {
    "name": "get_ticket", "description": "Fetch an issue tracker ticket.",
    "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                   "additionalProperties": False}}}]


def call(name: str, args: dict) -> str:
    return ToolCall(name, args).text()


def test_calls_are_validated_against_the_requests_own_tools():
    req = parse(body(tools=CLIENT_TOOLS))
    assert req.template_tools == CLIENT_TOOLS
    ok = req.tools and parse_response(call("get_ticket", {"id": 7}), req.tools)
    assert [r.status for r in ok.records] == [ToolCallStatus.ok]
    wrong_args = parse_response(call("get_ticket", {"id": "seven"}), req.tools)
    assert wrong_args.records[0].status is ToolCallStatus.validation_error and "schema" in wrong_args.records[0].error
    not_offered = parse_response(READ.text(), req.tools)
    assert not_offered.records[0].status is ToolCallStatus.validation_error
    assert "not offered" in not_offered.records[0].error


def test_without_tools_the_built_in_five_are_the_default_set():
    req = parse(body())
    assert req.tools is None and req.template_tools is None
    assert parse_response(READ.text(), req.tools).records[0].status is ToolCallStatus.ok
    assert parse_response(call("get_ticket", {"id": 7}), req.tools).records[0].status is \
        ToolCallStatus.validation_error


def test_tool_choice_none_offers_nothing_and_a_named_function_offers_only_it():
    none = parse(body(tools=CLIENT_TOOLS, tool_choice="none"))
    assert none.template_tools is None
    assert parse_response(call("get_ticket", {"id": 1}), none.tools).records[0].status is \
        ToolCallStatus.validation_error
    two = CLIENT_TOOLS + [{"type": "function", "function": {"name": "close_ticket", "parameters": {}}}]
    named = parse(body(tools=two, tool_choice={"type": "function", "function": {"name": "close_ticket"}}))
    assert [t["function"]["name"] for t in named.template_tools] == ["close_ticket"]
    assert parse_response(call("get_ticket", {"id": 1}), named.tools).records[0].status is \
        ToolCallStatus.validation_error


def test_the_developer_role_is_the_system_role():
    r = parse(body(messages=[{"role": "developer", "content": "be terse"}, {"role": "user", "content": "hi"}]))
    assert r.messages[0] == {"role": "system", "content": "be terse"}


def test_a_greedy_sample_logs_behaviour_log_probs_of_zero():
    """At temperature 0 the sampled token had probability 1: the trainer's importance weights must see that."""
    req = parse(body(temperature=0))
    s = served("x" * 12, req)
    s.sampling = Sampling(temperature=0.0)
    (t,) = build_trajectories(s)
    assert t.behaviour_logprobs == [0.0, 0.0, 0.0] and t.temperature == 0.0
    assert [c["logprob"] for c in build_response(s)["choices"][0]["logprobs"]["content"]] == [-0.5, -0.5, 0.0]
