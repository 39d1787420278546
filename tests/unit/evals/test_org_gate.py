"""An org's specialized candidate through the gate (evals/org_gate.py): its own suite is generated in its
workspaces with its convention (or read from gate.tasks.org_suites_dir), the champion it faces is what the org is
served,
and it passes only when the held-out suite and its own suite both pass; the tags say which failed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from codetasks.tasks import PHRASES
from codetasks.workspace import org_of
from evals import org_gate
from evals.tasks import load_suite
from tests.conftest import make_config


@dataclass
class FakeResult:
    decision: str
    reasons: list = field(default_factory=list)

    @property
    def promote(self) -> bool:
        return self.decision == "promote"

    def interval_text(self) -> str:
        return "[+0.01, +0.05]"


@dataclass
class FakeRun:
    result: FakeResult
    out_dir: Path
    candidate_version: str = ""


class Tags:
    """What the gate would read and write in the registry."""

    def __init__(self, aliases):
        self.aliases, self.tags = aliases, {}

    def version_of(self, alias):
        return self.aliases.get(alias)

    def set_version_tags(self, version, tags):
        self.tags.setdefault(version, {}).update(tags)


def _phrased(prompt: str, split: str) -> bool:
    """Whether `prompt` is one of `split`'s request templates filled in."""
    templates = [t for ts in PHRASES[split].values() for t in ts]
    return any(re.fullmatch(re.sub(r"\\\{\w+\\\}", ".+", re.escape(t)), prompt, re.IGNORECASE) for t in templates)


def test_an_orgs_suite_is_generated_once_in_its_convention_and_other_orgs_need_a_folder(tmp_path):
    cfg = make_config(tmp_path, "gate.tasks.org_suite_tasks=4")
    d = org_gate.org_suite(cfg, "o1")
    assert d == org_gate.org_suite(cfg, "o1") and (d / ".complete").is_file()
    assert org_of(1, cfg.simulator.seed).style in d.name
    assert {t.spec.cluster for t in load_suite(d)} == {"o1"} and len(load_suite(d)) == 4
    prompts = [t.prompt.strip() for t in load_suite(d)]
    assert all(_phrased(p, "train") and not _phrased(p, "eval") for p in prompts), prompts   # as its users ask
    with pytest.raises(LookupError, match="org_suites_dir"):
        org_gate.org_suite(cfg, "acme")
    (tmp_path / "suites" / "acme").mkdir(parents=True)
    given = make_config(tmp_path, f'gate.tasks.org_suites_dir="{tmp_path / "suites"}"')
    assert org_gate.org_suite(given, "acme") == tmp_path / "suites" / "acme"


@pytest.mark.parametrize("held_out,own,passed", [("promote", "promote", True), ("promote", "keep_champion", False),
                                                 ("keep_champion", "promote", False)])
def test_a_specialized_candidate_passes_only_when_both_suites_pass(tmp_path, monkeypatch, held_out, own, passed):
    cfg = make_config(tmp_path, "gate.tasks.org_suite_tasks=2")
    calls = []

    def fake_run_gate(cfg, candidate, champion, suite=None, **kw):
        calls.append((candidate, champion, suite))
        decision = held_out if suite is None else own
        return FakeRun(FakeResult(decision, [] if decision == "promote" else ["inferior"]), tmp_path / "run",
                       candidate)

    monkeypatch.setattr(org_gate, "run_gate", fake_run_gate)
    reg = Tags({"champion": "5"})
    _, _, ok = org_gate.run_org_gate(cfg, "2@o1", registry=reg, log=lambda m: None)
    assert ok is passed
    assert [c[:2] for c in calls] == [("2@o1", "5"), ("2@o1", "5")]      # o1 has no champion: the shared one
    assert calls[0][2] is None and calls[1][2] == org_gate.org_suite(cfg, "o1")
    tags = reg.tags["2@o1"]
    assert tags["gate.org_suite.decision"] == own
    assert ("gate.decision" in tags) == (held_out == "promote" and own != "promote")
    reg = Tags({"champion": "5", "champion@o1": "1@o1"})
    org_gate.run_org_gate(cfg, "2@o1", registry=reg, log=lambda m: None)
    assert calls[-1][1] == "1@o1"                                          # the org's own champion


@pytest.mark.parametrize("given,held_out_tasks,samples", [({}, 5, 2), ({"max_tasks": 3, "samples": 4}, 3, 4)])
def test_an_orgs_candidate_runs_the_configured_part_of_the_held_out_suite(tmp_path, monkeypatch, given,
                                                                         held_out_tasks, samples):
    cfg = make_config(tmp_path, "gate.tasks.org_suite_tasks=2", "gate.tasks.org_max_tasks=5",
                      "gate.tasks.org_samples_per_task=2")
    calls = []

    def fake_run_gate(cfg, candidate, champion, suite=None, **kw):
        calls.append((suite, kw.get("max_tasks"), kw.get("samples")))
        return FakeRun(FakeResult("promote", []), tmp_path / "run", candidate)

    monkeypatch.setattr(org_gate, "run_gate", fake_run_gate)
    org_gate.run_org_gate(cfg, "2@o1", registry=Tags({"champion": "5"}), log=lambda m: None, **given)
    assert calls == [(None, held_out_tasks, samples), (org_gate.org_suite(cfg, "o1"), None, samples)]
