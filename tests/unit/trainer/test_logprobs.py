"""Per-token log-probs and entropy: the chunked torch path and the Triton kernel (interpreter on CPU) match the
naive log_softmax reference in values and gradients."""

import pytest
import torch

from trainer.logprobs import chunked_token_logprobs, naive_token_logprobs, token_logprobs

INTERPRET = not torch.cuda.is_available()  # without CUDA the kernel runs in Triton's interpreter
if INTERPRET:
    # Triton reads TRITON_INTERPRET when it defines a function (its own in triton.language, and the kernel's): set
    # while they are imported, here at collection, before any test imports Triton (test_decode imports
    # transformers, which imports it, at run time); then again while this module's tests run (below). Left set,
    # it would reach every other test and every process they start.
    with pytest.MonkeyPatch.context() as _mp:
        _mp.setenv("TRITON_INTERPRET", "1")
        import trainer.kernels.fused_logprobs  # noqa: F401


@pytest.fixture(scope="module", autouse=True)
def _triton_interpreter():
    """TRITON_INTERPRET=1 (without CUDA) while this module's tests run: Triton also reads it as kernels run."""
    with pytest.MonkeyPatch.context() as mp:
        if INTERPRET:
            mp.setenv("TRITON_INTERPRET", "1")
        yield


def _case(n=37, v=1500, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(n, v, generator=g) * 3).to(dtype).requires_grad_(True)
    tokens = torch.randint(0, v, (n,), generator=g)
    weights = torch.randn(n, generator=g), torch.randn(n, generator=g)
    return logits, tokens, weights


def _value_and_grad(fn, logits, tokens, weights):
    lp, ent = fn(logits, tokens)
    (lp * weights[0] + ent * weights[1]).sum().backward()
    grad = logits.grad.clone()
    logits.grad = None
    return lp.detach(), ent.detach(), grad


@pytest.mark.parametrize("impl", ["chunked", "triton"])
def test_values_and_gradients_match_the_naive_reference(impl):
    logits, tokens, w = _case()
    ref = _value_and_grad(naive_token_logprobs, logits, tokens, w)
    got = _value_and_grad(lambda x, t: token_logprobs(x, t, impl=impl, chunk=8), logits, tokens, w)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_hand_computed_two_class_case():
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]], requires_grad=True)
    lp, ent = chunked_token_logprobs(logits, torch.tensor([0, 1]))
    p = torch.sigmoid(torch.tensor(2.0))  # p(class 0) in row 2
    torch.testing.assert_close(lp, torch.stack([torch.log(torch.tensor(0.5)), torch.log(1 - p)]), atol=1e-6, rtol=0)
    torch.testing.assert_close(ent[0], torch.log(torch.tensor(2.0)), atol=1e-6, rtol=0)
    lp.sum().backward()  # d lp / d x = onehot - p
    torch.testing.assert_close(logits.grad, torch.tensor([[0.5, -0.5], [-p, p]]), atol=1e-6, rtol=0)


def test_batched_shapes_and_extreme_logits_stay_finite():
    logits = torch.tensor([[[1e4, -1e4, 0.0], [-1e4, -1e4, 50.0]]])
    tokens = torch.tensor([[1, 2]])
    for impl in ("chunked", "triton", "naive"):
        lp, ent = token_logprobs(logits, tokens, impl=impl)
        assert lp.shape == (1, 2) and torch.isfinite(lp).all() and torch.isfinite(ent).all()
        assert lp[0, 1].item() == pytest.approx(0.0, abs=1e-6)


def test_unknown_implementation_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown log-prob implementation"):
        token_logprobs(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), impl="magic")


@pytest.mark.parametrize("impl", ["chunked", "triton"])
def test_linear_path_matches_head_then_log_softmax_in_values_and_both_gradients(impl):
    from trainer.logprobs import linear_token_logprobs

    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(29, 16, generator=g, requires_grad=True)
    weight = (torch.randn(300, 16, generator=g) * 0.5).requires_grad_(True)
    tokens = torch.randint(0, 300, (29,), generator=g)
    w1, w2 = torch.randn(29, generator=g), torch.randn(29, generator=g)
    results = []
    for fn in (lambda: naive_token_logprobs(hidden @ weight.t(), tokens),
               lambda: linear_token_logprobs(hidden, weight, tokens, chunk=7, impl=impl)):
        lp, ent = fn()
        (lp * w1 + ent * w2).sum().backward()
        results.append((lp.detach(), ent.detach(), hidden.grad.clone(), weight.grad.clone()))
        hidden.grad = weight.grad = None
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# The linear path with 16-bit hidden states and head (bf16/fp16 training) against float32 log-softmax of the same
# values, at logits of std ~4 (max ~20, a trained model's range): the chunk's logits are rounded to the head's dtype
# (as serving's are), so bf16 (8 mantissa bits) costs ~1e-2 and fp16 (11) ~1e-3. Mean and max bounds of |delta
# log-prob| (and entropy), then of the gradients' error relative to their norm; docs/trainer.md quotes the figures.
SIXTEEN_BIT_TOL = {torch.bfloat16: (2e-2, 1e-1, 3e-2), torch.float16: (3e-3, 2e-2, 5e-3)}


@pytest.mark.parametrize("impl", ["chunked", "triton"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_path_in_16_bits_agrees_with_float32_within_the_stated_tolerance(impl, dtype):
    from trainer.logprobs import linear_token_logprobs

    g = torch.Generator().manual_seed(2)
    n, h, v = 48, 128, 8000
    hidden = torch.randn(n, h, generator=g).to(dtype).requires_grad_(True)
    weight = (torch.randn(v, h, generator=g) * (4.0 / h ** 0.5)).to(dtype).requires_grad_(True)
    tokens = torch.randint(0, v, (n,), generator=g)
    ref_h, ref_w = hidden.detach().float().requires_grad_(True), weight.detach().float().requires_grad_(True)
    ref_lp, ref_ent = naive_token_logprobs(ref_h @ ref_w.t(), tokens)
    lp, ent = linear_token_logprobs(hidden, weight, tokens, chunk=16, impl=impl)
    mean_tol, max_tol, grad_tol = SIXTEEN_BIT_TOL[dtype]
    for got, ref in ((lp, ref_lp), (ent, ref_ent)):
        delta = (got.detach() - ref.detach()).abs()
        assert float(delta.mean()) < mean_tol and float(delta.max()) < max_tol
    (lp.sum() + ent.sum()).backward()
    (ref_lp.sum() + ref_ent.sum()).backward()
    assert hidden.grad.dtype == dtype and weight.grad.dtype == dtype
    for got, ref in ((hidden.grad, ref_h.grad), (weight.grad, ref_w.grad)):
        assert float((got.float() - ref).norm() / ref.norm()) < grad_tol
