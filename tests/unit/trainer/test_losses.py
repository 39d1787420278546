"""Losses against hand-derived values, and the invariance the engine relies on (splitting a batch into
micro-batches with a constant normalizer gives the same gradient)."""

import math

import pytest
import torch

from trainer.losses import (LossConfig, LossInputs, advantages, aggregate, kl_k1, kl_k3, policy_loss)


def test_group_mean_where_groups_exist_else_leave_one_out_within_the_stratum():
    a = advantages(torch.tensor([1.0, 0.0, 2.0, 4.0, 7.0]), groups=["g", "g", None, None, None],
                   strata=["edit", "edit", "edit", "edit", "question"])
    # group g: mean 0.5; ungrouped edits: b2 = 4, b3 = 2; the lone question: b = its own reward
    assert a.values.tolist() == [0.5, -0.5, -2.0, 2.0, 0.0]
    assert a.baselines.tolist() == [0.5, 0.5, 4.0, 2.0, 7.0] and a.from_group.tolist() == [True, True, False, False, False]


def test_a_group_of_one_falls_back_to_leave_one_out_and_std_normalization_is_optional():
    a = advantages(torch.tensor([1.0, 3.0, 5.0]), groups=["solo", None, None])
    assert a.values.tolist() == [-3.0, -0.0, 3.0]  # b = (3+5)/2, (1+5)/2, (1+3)/2
    s = advantages(torch.tensor([1.0, 0.0]), groups=["g", "g"], normalize_std=True, eps=0.0)
    assert s.values.tolist() == [1.0, -1.0]  # (r - 0.5) / 0.5


def test_negative_advantages_are_scaled_by_the_negative_weight_and_positive_ones_kept():
    r = torch.tensor([1.0, 3.0, 5.0])                       # leave-one-out: A = -3, 0, +3
    assert advantages(r, negative_weight=0.25).values.tolist() == [-0.75, 0.0, 3.0]
    zero = advantages(r, negative_weight=0.0)
    assert zero.values.tolist() == [0.0, 0.0, 3.0] and zero.baselines.tolist() == [4.0, 3.0, 2.0]
    assert advantages(r).values.tolist() == [-3.0, 0.0, 3.0]   # 1 (the function's default): symmetric
    with pytest.raises(ValueError, match="negative_weight"):
        advantages(r, negative_weight=1.5)


def test_a_negative_weight_per_row_scales_each_below_baseline_row_by_its_own():
    r = torch.tensor([1.0, 3.0, 5.0, 1.0])                  # leave-one-out: A = -2, +2/3, +10/3, -2
    a = advantages(r, negative_weight=torch.tensor([0.0, 0.0, 0.0, 1.0])).values
    assert a.tolist() == pytest.approx([0.0, 2 / 3, 10 / 3, -2.0])
    with pytest.raises(ValueError, match="negative_weight"):
        advantages(r, negative_weight=torch.tensor([0.0, 0.0, 0.0, 1.5]))


def test_aggregations_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(x, m, "constant", 10.0).item() == pytest.approx(1.0)
    assert aggregate(x, m, "token_mean").item() == pytest.approx(2.5)
    assert aggregate(x, m, "seq_mean").item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="positive constant"):
        aggregate(x, m, "constant")
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate(x, m, "median")


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor(math.log(0.5)), torch.tensor(math.log(0.25))
    assert kl_k1(logp, ref).item() == pytest.approx(math.log(2), abs=1e-7)
    assert kl_k3(logp, ref).item() == pytest.approx(0.5 - 1 + math.log(2), abs=1e-7)
    assert kl_k3(ref, ref).item() == 0.0


def _one_token(logp_value: float, adv: float, old=math.log(0.5), beh=math.log(0.5), **cfg):
    logp = torch.tensor([[logp_value]], requires_grad=True)
    out = policy_loss(LossInputs(logp, torch.tensor([[old]]), torch.tensor([[beh]]), torch.tensor([adv]),
                                 torch.tensor([[1]])), LossConfig(constant=1.0, **cfg))
    out.loss.backward()
    return out, logp.grad.item()


def test_ratio_inside_the_clip_range_is_the_plain_surrogate():
    out, grad = _one_token(math.log(0.6), 1.0)          # ratio 1.2 within [0.8, 1.28]
    assert out.loss.item() == pytest.approx(-1.2, abs=1e-6) and grad == pytest.approx(-1.2, abs=1e-6)
    assert out.clipped_fraction == 0 and out.ratio_mean == pytest.approx(1.2, abs=1e-6)


def test_clipping_stops_the_gradient_only_on_the_side_that_helps():
    out, grad = _one_token(math.log(0.75), 1.0)         # ratio 1.5 > 1.28 with A > 0: clipped, no gradient
    assert out.loss.item() == pytest.approx(-1.28, abs=1e-6) and grad == 0.0 and out.clipped_fraction == 1.0
    out, grad = _one_token(math.log(0.75), -1.0)        # A < 0: the unclipped term is the minimum
    assert out.loss.item() == pytest.approx(1.5, abs=1e-6) and grad == pytest.approx(1.5, abs=1e-6)
    assert out.clipped_fraction == 0.0
    out, grad = _one_token(math.log(0.75), 1.0, variant="pg")  # no clipping at all
    assert out.loss.item() == pytest.approx(-1.5, abs=1e-6) and grad == pytest.approx(-1.5, abs=1e-6)


def test_truncated_importance_weight_is_capped_and_reports_the_mismatch():
    out, grad = _one_token(math.log(0.5), 1.0, beh=math.log(0.5 / 3))   # old/behaviour = 3 -> capped at 2
    assert out.tis_weight_mean == pytest.approx(2.0) and out.loss.item() == pytest.approx(-2.0, abs=1e-6)
    assert out.mismatch == pytest.approx(math.log(3), abs=1e-6)
    out, _ = _one_token(math.log(0.5), 1.0, beh=math.log(0.5 / 1.5), tis_cap=2.0)
    assert out.tis_weight_mean == pytest.approx(1.5, abs=1e-6)


def test_kl_term_is_added_with_its_coefficient():
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    inp = LossInputs(logp, logp.detach(), logp.detach(), torch.tensor([0.0]), torch.tensor([[1]]),
                     ref_logp=torch.tensor([[math.log(0.25)]]))
    out = policy_loss(inp, LossConfig(constant=1.0, kl_coef=0.1))
    assert out.loss.item() == pytest.approx(0.1 * math.log(2), abs=1e-6) and out.kl.item() == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="needs ref_logp"):
        policy_loss(LossInputs(logp, logp.detach(), logp.detach(), torch.tensor([0.0]), torch.tensor([[1]])),
                    LossConfig(constant=1.0, kl_coef=0.1))


def test_micro_batches_with_a_constant_normalizer_give_the_gradient_of_the_whole_batch():
    g = torch.Generator().manual_seed(0)
    b, t = 6, 5
    params = torch.randn(b, t, generator=g, requires_grad=True)
    old = torch.randn(b, t, generator=g) - 1
    beh = old + 0.05 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g)
    mask = (torch.rand(b, t, generator=g) > 0.2).long()
    cfg = LossConfig(constant=float(b * t), kl_coef=0.05, kl_estimator="k3")

    def loss(ix):
        logp = torch.log_softmax(params, -1)[ix]
        return policy_loss(LossInputs(logp, old[ix], beh[ix], adv[ix], mask[ix], ref_logp=old[ix] - 0.1), cfg).loss

    loss(torch.arange(b)).backward()
    whole = params.grad.clone()
    for split in ([0, 1, 2], [3, 4, 5]), ([0], [1, 2, 3, 4], [5]):
        params.grad = None
        for ix in split:
            loss(torch.tensor(ix)).backward()
        torch.testing.assert_close(params.grad, whole, atol=1e-6, rtol=1e-6)


def test_unknown_variant_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown loss variant"):
        _one_token(0.0, 1.0, variant="dpo")


def test_negative_tokens_push_down_only_the_first_tokens_of_a_below_baseline_row():
    mask = torch.tensor([[0, 1, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.float32)   # completions start at 1 and 2

    def grads(advantage: float, **cfg):
        logp = torch.full((2, 5), math.log(0.5), requires_grad=True)
        out = policy_loss(LossInputs(logp, logp.detach(), logp.detach(), torch.tensor([advantage, advantage]), mask),
                          LossConfig(constant=1.0, **cfg))
        out.loss.backward()
        return logp.grad

    g = grads(-1.0, negative_tokens=2, negative_weight=0.0)
    assert torch.equal(g != 0, torch.tensor([[False, True, True, False, False], [False, False, True, True, False]]))
    assert torch.allclose(g[g != 0], torch.ones(4))         # the full advantage on the decision tokens
    tail = grads(-1.0, negative_tokens=2, negative_weight=0.25)
    assert tail[0, 3].item() == pytest.approx(0.25) and tail[0, 1].item() == pytest.approx(1.0)
    # above-baseline rows push every token, as without it; N = 0 leaves the advantages as given
    assert torch.equal(grads(1.0, negative_tokens=2, negative_weight=0.0), grads(1.0))
    assert torch.equal(grads(-1.0, negative_tokens=0, negative_weight=0.0), grads(-1.0))
