"""Prompt groups for the group-mean baseline: a request's group_id where serving drew n > 1 samples, else the
prompt's token ids. Advantages derived by hand."""

import polars as pl
import pytest
import torch

from trainer.losses import advantages
from trainer.train import prompt_groups

SAME_PROMPT = [[7, 8, 9]] * 4
REWARDS = torch.tensor([1.0, 0.0, 3.0, 5.0])


def _adv(group_ids):
    rows = pl.DataFrame({"prompt_token_ids": SAME_PROMPT, "group_id": group_ids},
                        schema={"prompt_token_ids": pl.List(pl.Int64), "group_id": pl.String})
    a = advantages(REWARDS, prompt_groups(rows))
    return a.values.tolist(), a.from_group.tolist()


def test_samples_of_separate_requests_with_the_same_prompt_are_separate_groups():
    values, grouped = _adv(["req-a", "req-a", "req-b", "req-b"])
    assert values == pytest.approx([0.5, -0.5, -1.0, 1.0])        # baselines 0.5 (req-a) and 4.0 (req-b)
    assert all(grouped)


def test_samples_of_one_request_are_one_group():
    values, grouped = _adv(["req-a"] * 4)
    assert values == pytest.approx([-1.25, -2.25, 0.75, 2.75])     # baseline 2.25, the mean of all four
    assert all(grouped)


def test_rows_without_a_group_id_group_by_prompt_and_never_join_a_requests_group():
    values, _ = _adv([None] * 4)
    assert values == pytest.approx([-1.25, -2.25, 0.75, 2.75])     # single samples, same prompt: one group
    values, grouped = _adv(["req-a", "req-a", None, None])
    assert values == pytest.approx([0.5, -0.5, -1.0, 1.0])        # req-a's mean 0.5; the prompt group's 4.0
    assert all(grouped)
    no_column = pl.DataFrame({"prompt_token_ids": SAME_PROMPT[:2] + [[1]] * 2})   # a table from before v4
    groups = prompt_groups(no_column)
    assert groups[0] == groups[1] != groups[2] == groups[3]


def test_a_group_id_that_looks_like_a_prompt_key_does_not_merge_with_that_prompt():
    rows = pl.DataFrame({"prompt_token_ids": [[1], [1]], "group_id": [None, None]},
                        schema={"prompt_token_ids": pl.List(pl.Int64), "group_id": pl.String})
    key = prompt_groups(rows)[0].split(":", 1)[1]
    forged = rows.with_columns(group_id=pl.Series([key, None]))
    a, b = prompt_groups(forged)
    assert a != b
