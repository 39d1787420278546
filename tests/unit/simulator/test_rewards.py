"""The simulated users' events, with the trajectories serving would have logged, through the reward job's
one-pass computation: right edits earn more than wrong or broken ones, needed questions more than needless ones."""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

import pytest

from codetasks.policy import ErrorRates
from pipelines.rewards.assemble import assemble_rewards
from pipelines.rewards.classifiers import get_classifier
from pipelines.rewards.frames import frames_from_events
from pipelines.rewards.spec import RewardSpec
from tests.unit.simulator.sim import simulate, trajectories


@pytest.fixture(scope="module")
def rewarded():
    pop, sink, policy = simulate(users=8, hours=8, privacy_rate=0.1,
                                 errors=ErrorRates(wrong=0.25, broken=0.05, malformed=0.05, needless=0.1))
    spec = RewardSpec()
    out = assemble_rewards(frames_from_events(sink.events + trajectories(policy)), spec,
                           get_classifier(spec.classifier), fire_at=None)
    rows = {r["request_id"]: r for r in out.rows.iter_rows(named=True)}
    return pop, policy, out, rows


def test_every_non_private_request_gets_a_row_and_every_applied_edit_a_known_label(rewarded):
    pop, policy, out, rows = rewarded
    private = sum(s.metadata["privacy_mode"] for s in policy.served)
    assert private > 0 and out.counts["privacy_excluded"] == private
    assert len(rows) == len(policy.served) - private
    assert out.counts["unknown_labels"] == 0
    applied = [t for t in pop.stats.ledger if t.applied and t.request_id in rows]
    assert applied and all(rows[t.request_id]["persistence_label"] == "known" for t in applied)
    kept = [rows[t.request_id]["persistence"] for t in applied if not t.reverted]
    reverted = [rows[t.request_id]["persistence"] for t in applied if t.reverted]
    assert min(kept) == 1.0 and mean(reverted) < 0.2


def test_right_edits_earn_more_than_wrong_or_broken_ones(rewarded):
    pop, _, _, rows = rewarded
    by = defaultdict(list)
    for t in pop.stats.ledger:
        if t.request_id in rows:
            key = "needless" if t.needless_question else t.outcome
            by[key].append(rows[t.request_id]["reward"])
    assert all(len(by[k]) >= 15 for k in ("correct", "wrong", "broken", "question", "needless")), \
        {k: len(v) for k, v in by.items()}
    assert mean(by["correct"]) > 0.5 > -0.5 > mean(by["wrong"])
    assert mean(by["broken"]) < mean(by["wrong"]) + 0.25 and mean(by["broken"]) < -1.0
    assert mean(by["question"]) > mean(by["needless"])


def test_the_classifier_reads_the_follow_ups_as_the_users_meant_them(rewarded):
    pop, _, _, rows = rewarded
    agree = total = 0
    for t in pop.stats.ledger:
        r = rows.get(t.request_id)
        if r is None or not t.followup:
            continue
        total += 1
        agree += {"dissatisfied": r["followup_status"] == "dissatisfied",
                  "needless": r["question_unnecessary"],
                  }.get(t.followup, r["followup_status"] == "satisfied" and not r["question_unnecessary"])
    assert total > 100 and agree / total >= 0.9
