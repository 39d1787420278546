"""`rtrl bench serving`'s swap-by-delta stage: its serving-contract check measures how far a trajectory's
behaviour log-probs are from the trainer's recomputation on the version's own checkpoint, so it passes on the
right weights and fails on any other."""

from __future__ import annotations

import pytest
import torch

from infra.bench.serving_delta import LOGPROB_TOLERANCE, contract_difference
from serving.testing import make_child_checkpoint, make_tiny_checkpoint


def _trajectory(folder, prompt: list[int], completion: list[int]) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0]
    lp = torch.log_softmax(logits[len(prompt) - 1:-1], -1).gather(1, torch.tensor(completion)[:, None])[:, 0]
    return {"prompt_token_ids": prompt, "completion_token_ids": completion, "behaviour_logprobs": lp.tolist()}


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("versions")
    parent = make_tiny_checkpoint(tmp / "v3", seed=2)
    return parent, make_child_checkpoint(parent, tmp / "v4", seed=3)


def test_the_contract_holds_for_log_probs_of_the_versions_own_weights(versions):
    _, child = versions
    events = [_trajectory(child, [5, 9, 14, 3], [7, 8, 2]), _trajectory(child, [1, 2], [30, 31, 32, 33])]
    assert contract_difference(child, events) < 1e-5


def test_the_contract_check_fails_on_log_probs_of_the_parents_weights(versions):
    parent, child = versions
    events = [_trajectory(parent, [5, 9, 14, 3], [7, 8, 2, 11, 12, 40])]
    assert contract_difference(child, events) > LOGPROB_TOLERANCE


def test_the_contract_check_reports_the_largest_token_difference(versions):
    _, child = versions
    event = _trajectory(child, [5, 9, 14, 3], [7, 8, 2])
    event["behaviour_logprobs"][1] -= 0.25
    assert contract_difference(child, [event]) == pytest.approx(0.25, abs=1e-5)
