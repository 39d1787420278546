"""`trainer.decode.LlamaDecoder` computes what transformers' Llama forward computes (the same next-token logits
after a prompt and after each further token, grouped-query attention included, past max_position_embeddings too),
and `LocalPolicy` samples the same tokens with it as with transformers' forward, alone or in a batch."""

import pytest
import torch

from trainer.decode import LlamaDecoder


def _model(**overrides):
    # transformers is imported when a test runs, not when it is collected: it imports triton, which must not be
    # imported before test_logprobs sets TRITON_INTERPRET
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=4, max_position_embeddings=64, tie_word_embeddings=True,
               rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    cfg.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**cfg)).float().eval()


def _reference(model, prompt: list[int], tokens: list[int]) -> list[torch.Tensor]:
    """transformers' logits after the prompt and after each of `tokens`, with its own key/value cache."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        logits, past = [out.logits[0, -1]], out.past_key_values
        for t in tokens:
            out = model(input_ids=torch.tensor([[t]]), past_key_values=past, use_cache=True)
            logits.append(out.logits[0, -1])
            past = out.past_key_values
    return logits


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_prefill_and_each_step_give_the_logits_of_transformers_forward(kv_heads):
    model = _model(num_key_value_heads=kv_heads)
    prompt, tokens = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38], [46, 26, 43, 38, 32, 79, 50]
    expected = _reference(model, prompt, tokens)
    dec = LlamaDecoder(model)
    got = [dec.prefill([prompt])[0]] + [dec.step(torch.tensor([t]))[0] for t in tokens]
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    assert dec.length == len(prompt) + len(tokens)


def test_a_new_prefill_starts_a_new_sequence_and_the_cache_grows_past_the_models_positions():
    model = _model()
    dec = LlamaDecoder(model)
    dec.prefill([list(range(1, 40))])
    prompt = list(range(2, 62))          # 60 positions; 10 more tokens take it past max_position_embeddings (64)
    tokens = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    got = [dec.prefill([prompt])[0]] + [dec.step(torch.tensor([t]))[0] for t in tokens]
    for g, e in zip(got, _reference(model, prompt, tokens), strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    assert dec.max_len >= 70


@pytest.mark.parametrize("change", [{"attention_bias": True}, {"mlp_bias": True}, {"hidden_act": "gelu"},
                                    {"rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                                         "rope_theta": 10000.0}}])
def test_models_it_does_not_compute_like_transformers_are_refused(change):
    model = _model(**change)
    assert not LlamaDecoder.supports(model)
    with pytest.raises(ValueError, match="Llama models"):
        LlamaDecoder(model)
    assert LlamaDecoder.supports(_model())


def _tiny_policy(folder):
    from trainer.bootstrap.config import PolicyConfig
    from trainer.bootstrap.corpus import build_corpus
    from trainer.bootstrap.model import build_model
    from trainer.bootstrap.tokenizer import train_tokenizer

    tiny = PolicyConfig(vocab_size=300, hidden_size=32, intermediate_size=64, layers=2, heads=2,
                        max_position_embeddings=512, copy_circuit=False, train_orgs=2, train_workspaces=3,
                        tasks_per_workspace=2)
    corpus = build_corpus(tiny.seed, tiny.train_workspaces, tiny.tasks_per_workspace, tiny.train_orgs)
    tokenizer = train_tokenizer((e.prompt + e.completion for e in corpus), tiny.vocab_size)
    build_model(tiny, tokenizer, seed=1).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer, corpus


def test_local_policy_samples_the_same_tokens_with_the_decoder_as_with_transformers(tmp_path):
    from infra.offline_cycle import LocalPolicy

    tokenizer, corpus = _tiny_policy(tmp_path / "policy")
    lean, plain = (LocalPolicy(tmp_path / "policy", version="1", seed=5, max_new_tokens=24) for _ in range(2))
    assert lean.decoder is not None
    plain.decoder = None
    prompt = tokenizer(corpus[0].prompt, add_special_tokens=False)["input_ids"]
    for seed in range(3):
        (a, la), (b, lb) = lean._sample(prompt, seed), plain._sample(prompt, seed)
        assert a == b and len(a) >= 1
        assert la == pytest.approx(lb, abs=1e-4)


def test_local_policy_answers_each_request_the_same_alone_or_in_a_lockstep_batch(tmp_path):
    """A request's sample depends on its own seed only: decoded one at a time, or with seven others in one batch
    (threads inside `participant()`), every completion and its log-probs are the same."""
    import threading

    from infra.offline_cycle import LocalPolicy

    tokenizer, corpus = _tiny_policy(tmp_path / "policy")
    ids = [tokenizer(e.prompt, add_special_tokens=False)["input_ids"] for e in corpus]
    prompts = [ids[k % len(ids)][:200 + 13 * k] for k in range(8)]       # eight prompts of different lengths
    alone = LocalPolicy(tmp_path / "policy", version="1", max_new_tokens=40)
    one_by_one = [alone._sample(p, seed) for seed, p in enumerate(prompts)]
    assert alone.batches == 8

    together = LocalPolicy(tmp_path / "policy", version="1", max_new_tokens=40, max_batch=5)
    out: dict[int, tuple] = {}

    def ask(seed: int) -> None:
        with together.participant():
            out[seed] = together._sample(prompts[seed], seed)

    threads = [threading.Thread(target=ask, args=(k,)) for k in range(8)]
    together.expect(len(threads))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert together.batches == 1                          # every participant waited: one batch (in two chunks)
    for seed, (tokens, logps) in enumerate(one_by_one):
        assert out[seed][0] == tokens
        assert out[seed][1] == pytest.approx(logps, abs=1e-5)


def test_a_batch_that_drops_rows_goes_on_as_the_rows_it_keeps():
    model = _model(num_key_value_heads=2)
    prompts = [[3, 14, 15, 92, 65, 35, 89], [11, 12], [79, 32, 38, 46, 26], [50, 28, 84, 19, 71, 69, 39, 93, 75]]
    full, part = LlamaDecoder(model), LlamaDecoder(model)
    full.prefill(prompts, 0)
    part.prefill(prompts, 0)
    tokens = torch.tensor([5, 6, 7, 8])
    full.step(tokens)
    part.step(tokens)
    keep = torch.tensor([3, 1])
    part.keep(keep)
    expected = full.step(torch.tensor([9, 10, 11, 12]))[keep]
    assert torch.allclose(part.step(torch.tensor([12, 10])), expected, atol=1e-5)


@pytest.mark.parametrize("sample", [False, True])
def test_a_left_padded_batch_continues_as_transformers_generate_continues_it(sample):
    from transformers import GenerationConfig

    from trainer.decode import generate

    model = _model(num_key_value_heads=2)
    eos = pad = 4
    prompts = [[3, 14, 15, 92, 65, 35, 89], [11, 12], [79, 32, 38, 46, 26], [50, 28, 84, 19, 71, 69, 39, 93, 75]]
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    extra = {"temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {}
    gen = GenerationConfig(do_sample=sample, max_new_tokens=30, eos_token_id=eos, pad_token_id=pad, **extra)
    torch.manual_seed(3)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)[:, width:].tolist()
    expected = [row[:row.index(eos) + 1] if eos in row else row for row in out]
    torch.manual_seed(3)
    got = generate(model, prompts, sample=sample, max_new_tokens=30, eos_id=eos, pad_id=pad)
    assert got == expected
    if sample:   # a row ended at eos while others went on: the finished row was fed padding
        assert min(map(len, got)) < 30 < max(map(len, got)) + 1
