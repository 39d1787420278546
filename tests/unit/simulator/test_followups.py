"""The follow-ups users write are labelled as meant by the reward job's default classifier (at least 90%)."""

from __future__ import annotations

import random

import polars as pl
import pytest

from codetasks import followups
from codetasks.tasks import make_task
from codetasks.workspace import make_workspace, org_of
from pipelines.rewards.classifiers import get_classifier

INTENDED = {  # list -> (dissatisfied, question_unnecessary)
    "WRONG": (True, False),
    "BROKEN": (True, False),
    "NEEDLESS": (False, True),
    "SATISFIED": (False, False),
}


def _labels(texts):
    out = get_classifier("keywords").classify(pl.Series(list(texts), dtype=pl.String))
    return list(zip(out["dissatisfied"], out["question_unnecessary"]))


@pytest.mark.parametrize("name", sorted(INTENDED))
def test_each_template_list_is_classified_as_intended(name):
    texts = getattr(followups, name)
    assert len(texts) >= 8
    right = sum(label == INTENDED[name] for label in _labels(texts))
    assert right / len(texts) >= 0.9, f"{name}: {right}/{len(texts)} labelled as intended"


def _tasks(n=400):
    out = []
    for o in range(4):
        ws = make_workspace(0, org_of(o), 0, 5)
        rng = random.Random(o)
        out += [make_task(rng, ws, str(k), ambiguous_rate=0.5) for k in range(n // 4)]
    return out


def test_clarifications_and_repeated_requests_are_neutral():
    tasks = _tasks()
    rng = random.Random(0)
    texts = {t.clarification for t in tasks if t.clarification}
    texts |= {followups.pick(rng, followups.RETRY, request=t.request) for t in tasks}
    assert len(texts) > 100
    labels = _labels(sorted(texts))
    assert sum(label == (False, False) for label in labels) / len(labels) >= 0.9
