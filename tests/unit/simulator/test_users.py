"""The simulated users against the deterministic reference policy: determinism, reaction rates, clarifications,
broken edits, snapshots at the horizon, schema validity, privacy, and the SDK path."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta

import pytest

from instrumentation.fingerprint import file_id, line_fingerprints
from instrumentation.sdk import TelemetryClient
from codetasks import followups
from instrumentation.simulator.config import SimulatorConfig
from codetasks.policy import ErrorRates
from instrumentation.simulator.user import hunks
from codetasks.workspace import org_of
from schemas import parse_wire, to_wire
from schemas.events import ResponseKind, ToolErrorKind
from tests.unit.instrumentation.factories import FakeTransport
from tests.unit.simulator.sim import simulate

MIXED = ErrorRates(wrong=0.2, broken=0.05, malformed=0.05, needless=0.05, guess=0.1)


def _dump(events):
    return [e.model_dump(mode="json") for e in events]


def _by_type(events):
    out = defaultdict(list)
    for e in events:
        out[e.event_type].append(e)
    return out


def test_the_same_seed_gives_the_same_events_and_another_seed_does_not():
    _, a, _ = simulate(seed=7, users=5, hours=4, errors=MIXED)
    _, b, _ = simulate(seed=7, users=5, hours=4, errors=MIXED)
    _, c, _ = simulate(seed=8, users=5, hours=4, errors=MIXED)
    assert len(a.events) > 500
    assert _dump(a.events) == _dump(b.events)       # every field, event ids and times included
    assert _dump(a.events) != _dump(c.events)
    assert {e.event_type for e in a.events} == {"suggestion_shown", "edit_applied", "edit_rejected",
                                                 "codebase_snapshot", "followup_message", "tool_call_result"}
    assert len({e.event_id for e in a.events}) == len(a.events)


def test_the_deterministic_mode_reads_no_wall_clock(monkeypatch):
    def no_clock(*_):
        raise AssertionError("the deterministic simulation read the wall clock")

    for name in ("time", "monotonic", "perf_counter", "sleep", "time_ns", "monotonic_ns"):
        monkeypatch.setattr(time, name, no_clock)
    pop, sink, _ = simulate(users=3, hours=2, errors=MIXED)
    assert pop.stats.c["requests"] > 20 and sink.events


def test_events_are_in_event_time_order_and_validate_against_the_schemas():
    _, sink, _ = simulate(users=4, hours=3, errors=MIXED)
    times = [e.event_time for e in sink.events]
    assert times == sorted(times)
    for e in sink.events:
        assert parse_wire(to_wire(e)) == e


def test_users_keep_right_edits_and_revert_wrong_ones_at_the_configured_rates():
    rates = dict(p_apply_correct=0.8, p_apply_wrong=0.5, p_keep_correct=0.9, p_revert_wrong=0.7)
    pop, _, _ = simulate(users=12, hours=12, errors=ErrorRates(wrong=0.4), think_s=(10.0, 30.0), **rates)
    turns = [t for t in pop.stats.ledger if t.applied is not None]
    right = [t for t in turns if t.outcome == "correct"]
    wrong = [t for t in turns if t.outcome == "wrong"]
    assert len(right) > 400 and len(wrong) > 300

    def frac(xs, pred):
        return sum(map(pred, xs)) / len(xs)

    assert frac(right, lambda t: t.applied) == pytest.approx(0.8, abs=0.04)
    assert frac(wrong, lambda t: t.applied) == pytest.approx(0.5, abs=0.05)
    assert frac([t for t in right if t.applied], lambda t: not t.reverted) == pytest.approx(0.9, abs=0.04)
    assert frac([t for t in wrong if t.applied], lambda t: t.reverted) == pytest.approx(0.7, abs=0.07)
    s = pop.summary()["edits"]
    assert s["applied"] == s["kept"] + s["reverted"] and s["shown"] == s["applied"] + s["rejected"]
    line = pop.progress(3.0)
    assert line.startswith(f"simulate · requests {pop.stats.c['requests']:,} · edits applied {s['applied']:,} "
                           f"kept {s['kept']:,} reverted {s['reverted']:,} · questions ")
    assert "errors 0 · sim 2026-11-" in line and line.endswith(" · 3s")


def _snapshots(events):
    snaps = defaultdict(list)
    for e in events:
        if e.event_type == "codebase_snapshot":
            snaps[(e.workspace_id, e.file_id)].append(e)
    return snaps


@pytest.mark.parametrize("keep", [1.0, 0.0])
def test_the_snapshot_at_the_horizon_shows_the_kept_or_reverted_file(keep):
    cfg = SimulatorConfig()
    pop, sink, policy = simulate(users=2, hours=3, p_apply_correct=1.0, p_keep_correct=keep)
    by_id = {s.request_id: s for s in policy.served}
    applied = [e for e in sink.events if e.event_type == "edit_applied"]
    snaps = _snapshots(sink.events)
    assert len(applied) > 10
    for e in applied:
        task = by_id[e.request_id].task
        horizon = e.event_time + timedelta(seconds=cfg.snapshot_delay_s)
        window = [s for s in snaps[(e.workspace_id, e.file_id)] if e.event_time <= s.event_time <= horizon]
        assert window[-1].event_time == horizon and window[-1].trigger.value == "periodic"
        assert window[0].trigger.value == "save"  # saved right after applying, with the edit in it
        assert window[0].line_fingerprints == line_fingerprints(task.after)
        assert window[-1].line_fingerprints == line_fingerprints(task.after if keep else task.before)
        assert e.file_id == file_id(task.path) and e.hunks == hunks(task.before, task.after)


def test_a_kept_edit_becomes_the_workspace_state_and_files_with_pending_edits_get_no_new_task():
    pop, sink, policy = simulate(users=1, hours=8, p_apply_correct=1.0, p_keep_correct=1.0, think_s=(5.0, 10.0))
    served = [s for s in policy.served if len(s.messages) == 2]
    applied = {e.request_id: e.event_time for e in sink.events if e.event_type == "edit_applied"}
    # each task's file text is the previous kept edit's result
    last_after, checked = {}, 0
    for s in policy.served:
        t = s.task
        if t.path in last_after and len(s.messages) == 2:
            assert t.before == last_after[t.path]
            checked += 1
        if s.request_id in applied:
            last_after[t.path] = t.after
    assert checked > 10
    # no request on a file while an edit of it waits for its horizon snapshot
    lock = SimulatorConfig().snapshot_delay_s
    for s in served:
        asked = datetime.fromisoformat(s.metadata["event_time"])
        for o in policy.served:
            if o.task.path == s.task.path and o.request_id in applied:
                assert not applied[o.request_id] < asked < applied[o.request_id] + timedelta(seconds=lock)


def test_ambiguous_requests_get_the_clarification_and_the_clarified_turn_follows():
    pop, sink, policy = simulate(users=4, hours=6, ambiguous_rate=1.0, p_answer_question=1.0)
    served = policy.served
    follow = {e.previous_request_id: e for e in sink.events if e.event_type == "followup_message"}
    firsts = [(i, s) for i, s in enumerate(served) if s.task.ambiguous and len(s.messages) == 2]
    assert len(firsts) > 20
    for i, s in firsts:
        assert s.parsed.kind is ResponseKind.question
        f = follow[s.request_id]
        assert f.text == s.task.clarification and f.session_id == s.metadata["session_id"]
        nxt = next(o for o in served[i + 1:] if o.user == s.user)
        assert nxt.messages == s.task.clarified_messages(s.text)
        assert nxt.metadata["session_id"] == s.metadata["session_id"]
        assert f.event_time < datetime.fromisoformat(nxt.metadata["event_time"])
    turns = {t.request_id: t for t in pop.stats.ledger}
    assert all(turns[s.request_id].followup == "clarification" for _, s in firsts)
    clarified = [turns[o.request_id] for o in served if o.task.ambiguous and len(o.messages) == 4]
    assert clarified and all(t.outcome == "correct" and t.turn == 2 for t in clarified)


def test_needless_questions_get_a_complaint_and_the_request_again():
    pop, sink, policy = simulate(users=3, hours=3, errors=ErrorRates(needless=1.0), ambiguous_rate=0.0,
                                 p_complain_needless=1.0, max_turns=2)
    follow = {e.previous_request_id: e for e in sink.events if e.event_type == "followup_message"}
    firsts = [s for s in policy.served if len(s.messages) == 2]
    assert len(firsts) > 10
    for s in firsts:
        assert s.parsed.kind is ResponseKind.question
        assert follow[s.request_id].text in followups.NEEDLESS
    seconds = [s for s in policy.served if len(s.messages) == 4]
    assert len(seconds) == len(firsts)
    assert all(s.messages[-1]["content"] in followups.NEEDLESS for s in seconds)
    assert pop.summary()["needless_questions"] == len(policy.served)


def test_an_edit_that_cannot_apply_is_a_model_caused_tool_error_with_a_dissatisfied_followup():
    pop, sink, policy = simulate(users=3, hours=3, errors=ErrorRates(broken=1.0), ambiguous_rate=0.0,
                                 p_complain_broken=1.0, p_retry=0.0)
    ev = _by_type(sink.events)
    results = ev["tool_call_result"]
    assert len(results) == len(policy.served) > 10
    for r in results:
        assert (r.tool, r.ok, r.error_kind) == ("edit_file", False, ToolErrorKind.tool_error)
        assert "not found" in r.error_message
    assert {f.text for f in ev["followup_message"]} <= set(followups.BROKEN)
    assert len(ev["followup_message"]) == len(results)
    assert not ev["suggestion_shown"] and not ev["edit_applied"]
    assert pop.summary()["by_outcome"] == {"broken": len(results)}


def test_malformed_calls_are_broken_without_a_tool_result_and_retries_repeat_the_complaint():
    pop, sink, policy = simulate(users=2, hours=2, errors=ErrorRates(malformed=1.0), ambiguous_rate=0.0,
                                 p_complain_broken=1.0, p_retry=1.0, max_turns=3)
    assert not any(e.event_type == "tool_call_result" for e in sink.events)
    assert all(s.parsed.broken == 1 for s in policy.served)
    by_turn = Counter(t.turn for t in pop.stats.ledger)
    assert by_turn[1] == by_turn[2] == by_turn[3] > 5
    third = [s for s in policy.served if len(s.messages) == 6]
    assert third and all(s.messages[3]["content"] in followups.BROKEN for s in third)


def test_wrong_edits_get_dissatisfied_followups_and_right_ones_mostly_not():
    pop, sink, _ = simulate(users=6, hours=6, errors=ErrorRates(wrong=0.5), ambiguous_rate=0.0,
                            p_complain_wrong=1.0, p_complain_correct=0.0, p_retry=0.0)
    follow = {e.previous_request_id: e.text for e in sink.events if e.event_type == "followup_message"}
    for t in pop.stats.ledger:
        if t.outcome == "wrong":
            assert follow[t.request_id] in followups.WRONG
        else:
            assert follow.get(t.request_id, "Thanks!") in followups.SATISFIED


def test_privacy_mode_users_send_no_content():
    _, sink, policy = simulate(users=3, hours=2, errors=MIXED, privacy_rate=1.0)
    assert sink.events and all(e.privacy_mode for e in sink.events)
    assert all(e.text == "" for e in sink.events if e.event_type == "followup_message")
    assert all(e.error_message == "" for e in sink.events if e.event_type == "tool_call_result")
    assert all(s.metadata["privacy_mode"] is True for s in policy.served)


def test_metadata_and_event_ids_agree_with_what_the_user_sent():
    pop, sink, policy = simulate(users=4, hours=2, errors=MIXED)
    req = {s.request_id: s for s in policy.served}
    for e in sink.events:
        rid = getattr(e, "request_id", None) or getattr(e, "previous_request_id", None)
        if rid is None:
            continue
        m = req[rid].metadata
        assert (e.user_id, e.workspace_id, e.org_id) == (req[rid].user, m["workspace_id"], m["org_id"])
        assert e.event_time >= datetime.fromisoformat(m["event_time"])
    users = {u.user_id: u for u in pop.users}
    assert {s.metadata["org_id"] for s in policy.served} == {u.org.org_id for u in pop.users}
    assert all(users[s.user].workspace_id == s.metadata["workspace_id"] for s in policy.served)


def test_users_belong_to_orgs_whose_workspaces_follow_the_org_conventions():
    _, _, policy = simulate(users=8, hours=2, orgs=4)
    seen = set()
    for s in policy.served:
        org = org_of(int(s.metadata["org_id"][1:]))
        seen.add((org.org_id, org.style))
        assert s.messages[0]["content"].startswith(f"org {org.org_id}:")
        defs = [line[4:line.index("(")] for line in s.task.before.splitlines() if line.startswith("def ")]
        assert defs and all(("_" in d) == (org.style == "snake") for d in defs)  # load_config | loadConfig
    assert {style for _, style in seen} == {"snake", "camel"} and len(seen) == 4


def test_every_event_goes_through_the_telemetry_sdk(tmp_path):
    from instrumentation.config import SdkConfig

    transport = FakeTransport()
    client = TelemetryClient(transport, SdkConfig(linger_ms=1), tmp_path / "spool", name="simulator")
    _, mirror, _ = simulate(users=3, hours=2, errors=MIXED)
    pop, _, _ = simulate(users=3, hours=2, errors=MIXED, sink=client)
    client.close()
    sent = [parse_wire(r.value) for r in transport.records]
    assert [e.event_id for e in sent] == [e.event_id for e in mirror.events]
    assert client.stats()["sent"] == len(mirror.events) == pop.summary()["events_emitted"]["total"]


def test_first_sessions_start_within_start_spread_s_and_otherwise_within_one_session_gap():
    def first_requests(**overrides):
        pop, _, policy = simulate(seed=3, users=40, hours=3, **overrides)
        first: dict[str, datetime] = {}
        for s in policy.served:
            t = datetime.fromisoformat(s.metadata["event_time"])
            first[s.user] = min(first.get(s.user, t), t)
        return pop, first

    pop, first = first_requests(start_spread_s=300.0)
    start = pop.clock.start
    assert len(first) == 40 and max(first.values()) - start < timedelta(seconds=300 + 60)
    _, spread = first_requests()        # the steady state: spread over session_gap_s max (3600 s)
    assert max(spread.values()) - start > timedelta(seconds=600)


def test_the_configured_house_rules_reach_every_users_org_and_a_bad_org_id_is_refused():
    cfg = SimulatorConfig(keyword_only_orgs=["o0", "o2"])
    assert [(cfg.org(i).org_id, cfg.org(i).kwonly) for i in range(4)] == [
        ("o0", True), ("o1", False), ("o2", True), ("o3", False)]
    assert [cfg.org(i).style for i in range(4)] == [org_of(i).style for i in range(4)]
    assert all(SimulatorConfig().org(i) == org_of(i) for i in range(4))     # no rules: the orgs as they were
    with pytest.raises(ValueError, match="not simulated org ids"):
        SimulatorConfig(keyword_only_orgs=["acme"])
