"""The one gate (infra/gate_suites.py): a candidate is promoted only when every suite of gate.suites shows it
non-inferior; a suite that keeps the champion ends the gate; the decision, each suite's interval and the suite list
are tagged on the candidate, `gate.suites` last; the users suite reads its intervals from the users verdict."""

from __future__ import annotations

import pytest

import infra.gate_suites as gs
from infra.gate_suites import KEEP, PROMOTE, GateOutcome, SuiteOutcome, run_suites, users_suite
from tests.conftest import make_config


class Tags:
    """The part of the registry the gate uses: aliases and version tags, in memory."""

    def __init__(self, aliases: dict[str, str]):
        self.aliases, self.tags, self.order = aliases, {}, []

    def version_of(self, alias: str):
        return self.aliases.get(alias)

    def set_version_tags(self, version: str, tags: dict) -> None:
        self.tags.setdefault(version, {}).update(tags)
        self.order += list(tags)


def _suite(name: str, decision: str, low: float = -0.01) -> SuiteOutcome:
    return SuiteOutcome(name, gs.METRICS[name], decision, [] if decision == PROMOTE else ["inconclusive"],
                        vs_champion={"diff": 0.01, "low": low, "high": 0.03, "margin": 0.05})


@pytest.fixture
def ran(monkeypatch):
    """Each suite replaced by one that records its call and returns the decision the test sets."""
    calls, decisions = [], {}

    def tasks(cfg, candidate, champion, registry, log, **options):
        calls.append(("tasks", candidate, champion, options))
        return _suite("tasks", decisions["tasks"])

    def users(cfg, candidate, champion, anchor, registry, users_gate):
        calls.append(("users", candidate, champion, anchor))
        return _suite("users", decisions["users"])

    monkeypatch.setattr(gs, "tasks_suite", tasks)
    monkeypatch.setattr(gs, "users_suite", users)
    return calls, decisions


def test_every_suite_must_promote_and_the_decision_is_tagged_last_with_its_suites(tmp_path, ran):
    calls, decisions = ran
    decisions.update(tasks=PROMOTE, users=PROMOTE)
    cfg, reg = make_config(tmp_path), Tags({"champion": "2", "control": "1"})
    out = run_suites(cfg, "3", registry=reg, users_gate=object(), log=lambda m: None, samples=2)
    assert out.decision == PROMOTE and out.reasons == []
    assert [c[0] for c in calls] == ["tasks", "users"] and calls[0][3] == {"samples": 2}
    assert calls[1][1:] == ("3", "2", "1"), "against the champion and the anchor (alias control)"
    tags = reg.tags["3"]
    assert tags["gate.decision"] == PROMOTE and tags["gate.champion_version"] == "2"
    assert tags["gate.anchor_version"] == "1"
    assert tags["gate.tasks.decision"] == tags["gate.users.decision"] == PROMOTE
    assert reg.order[-1] == "gate.suites" and tags["gate.suites"] == "tasks,users"
    s = out.summary()
    assert [x["suite"] for x in s["suites"]] == ["tasks", "users"] and s["interval"].startswith("[-0.0100, +0.0300]")


def test_a_suite_that_keeps_the_champion_ends_the_gate(tmp_path, ran):
    calls, decisions = ran
    decisions.update(tasks=KEEP, users=PROMOTE)
    reg = Tags({"champion": "2", "control": "1"})
    out = run_suites(make_config(tmp_path), "3", registry=reg, users_gate=object(), log=lambda m: None)
    assert out.decision == KEEP and out.reasons == ["tasks:inconclusive"]
    assert [c[0] for c in calls] == ["tasks"], "the users suite did not run"
    assert [s.decision for s in out.suites] == [KEEP, "not_run"]
    assert reg.tags["3"]["gate.users.decision"] == "not_run" and reg.tags["3"]["gate.decision"] == KEEP


def test_the_suites_and_their_order_come_from_the_config(tmp_path, ran):
    calls, decisions = ran
    decisions.update(tasks=PROMOTE, users=KEEP)
    cfg = make_config(tmp_path, 'gate.suites=["users"]')
    out = run_suites(cfg, "3", registry=Tags({"champion": "2"}), users_gate=object(), log=lambda m: None)
    assert [c[0] for c in calls] == ["users"] and calls[0][3] is None, "no anchor alias set: no anchor"
    assert out.decision == KEEP and out.reasons == ["users:inconclusive"]


def test_no_champion_is_a_lookup_error_and_an_untracked_gate_tags_nothing(tmp_path, ran):
    _, decisions = ran
    decisions.update(tasks=PROMOTE, users=PROMOTE)
    with pytest.raises(LookupError, match="champion"):
        run_suites(make_config(tmp_path), "3", registry=Tags({}), users_gate=object(), log=lambda m: None)
    reg = Tags({"champion": "2"})
    run_suites(make_config(tmp_path), "3", registry=reg, users_gate=object(), log=lambda m: None, track=False)
    assert reg.tags == {}


def test_a_suite_list_with_a_repeat_or_an_unknown_suite_is_refused(tmp_path):
    from infra.config import ConfigError

    for bad in ('gate.suites=["tasks", "tasks"]', 'gate.suites=["vibes"]', "gate.suites=[]"):
        with pytest.raises(ConfigError, match="gate.suites"):
            make_config(tmp_path, bad)


def test_the_users_suite_reports_the_users_verdicts_bounds_as_its_intervals(tmp_path):
    class Gate:
        def decide(self, registry, candidate, champion, anchor, org=None, tag=True):
            assert (candidate, champion, anchor, org, tag) == ("3@o1", "2", "1", "o1", False)
            return {"decision": KEEP, "reasons": ["anchor:inconclusive"], "power": {"se": 0.01},
                    "checks": [{"name": "edit_persistence_rate", "against": "champion", "bound": 0.004},
                               {"name": "edit_persistence_rate", "against": "anchor", "bound": -0.05}],
                    "vs_champion": {"edit_persistence_rate": {"diff": 0.02, "se": 0.0097}},
                    "vs_anchor": {"edit_persistence_rate": {"diff": -0.02, "se": 0.0182}}}

    out = users_suite(make_config(tmp_path), "3@o1", "2", "1", None, Gate())
    assert out.decision == KEEP and out.reasons == ["anchor:inconclusive"] and out.power == {"se": 0.01}
    assert out.vs_champion == {"diff": 0.02, "low": 0.004, "high": pytest.approx(0.036), "margin": 0.03}
    assert out.vs_anchor == {"diff": -0.02, "low": -0.05, "high": pytest.approx(0.01), "margin": 0.03}
    assert GateOutcome("3@o1", "2", "1", [out]).decision == KEEP


def test_a_candidate_the_tasks_suite_staged_on_serving_is_unstaged_when_a_later_suite_keeps_the_champion(
        tmp_path, ran, monkeypatch):
    import evals.gate_run

    _, decisions = ran
    unstaged = []
    monkeypatch.setattr(evals.gate_run, "unstage_after", lambda cfg, versions, promote, log: unstaged.append(
        (versions, promote)))
    cfg = make_config(tmp_path, "gate.tasks.via_serving=true")
    decisions.update(tasks=PROMOTE, users=KEEP)
    run_suites(cfg, "3", registry=Tags({"champion": "2"}), users_gate=object(), log=lambda m: None)
    assert unstaged == [({"candidate": "3"}, False)]
    decisions.update(users=PROMOTE)                # promoted: it stays staged for the swap
    run_suites(cfg, "4", registry=Tags({"champion": "2"}), users_gate=object(), log=lambda m: None)
    assert len(unstaged) == 1
