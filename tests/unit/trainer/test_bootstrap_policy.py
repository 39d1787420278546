"""The default policy's pieces on tiny settings: corpus, tokenizer + chat template, loss masking, SFT updates and
determinism, the evaluation's bookkeeping, the checkpoint folder, and base-checkpoint validation."""

import json
import random

import pytest
import torch

from codetasks import followups
from codetasks.tasks import grade
from schemas.chat_format import CHAT_TEMPLATE, END, SPECIAL_TOKENS, render
from schemas.tool_protocol import parse_response
from trainer.bootstrap import sft
from trainer.bootstrap.config import PolicyConfig
from trainer.bootstrap.corpus import build_corpus, examples_of, generate_tasks
from trainer.bootstrap.evaluate import right_edits, score, turns_of
from trainer.bootstrap.model import build_model, n_parameters
from trainer.bootstrap.tokenizer import train_tokenizer

TINY = PolicyConfig(vocab_size=400, hidden_size=32, intermediate_size=64, layers=2, heads=1,
                    max_position_embeddings=512, copy_circuit=False, train_orgs=4, train_workspaces=6, tasks_per_workspace=3,
                    steps=3, batch_size=4, learning_rate=1e-2, warmup_steps=1, threads=1)


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(TINY.seed, TINY.train_workspaces, TINY.tasks_per_workspace, TINY.train_orgs)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tokenizer((e.prompt + e.completion for e in corpus), TINY.vocab_size)


def _train(corpus, tokenizer, seed=0, steps=3):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # for this training only: later tests get the process's thread count back
    try:
        data, _ = sft.encode(tokenizer, corpus, TINY.max_position_embeddings)
        model = build_model(TINY, tokenizer, seed, copy_circuit=False)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        result = sft.train(model, data, steps=steps, batch_size=4, lr=1e-2, warmup_steps=1, min_lr_ratio=0.1,
                           weight_decay=0.1, grad_clip=1.0, seed=seed, pad_id=tokenizer.pad_token_id, log_every=1,
                           log=lambda _: None)
    finally:
        torch.set_num_threads(threads)
    return before, model.state_dict(), result


def test_corpus_is_deterministic_and_covers_both_turns_of_ambiguous_tasks(corpus):
    assert build_corpus(0, 6, 3, 4) == corpus
    assert build_corpus(1, 6, 3, 4) != corpus
    assert all(e.prompt.endswith("<|assistant|>\n") and e.completion.endswith(END) for e in corpus)
    big = build_corpus(0, 40, 4, 8)
    assert {e.turn for e in big} == {"first", "clarified"}
    first_ambiguous = [e for e in big if e.ambiguous and e.turn == "first"]
    assert first_ambiguous and all(parse_response(e.completion.removesuffix(END)).kind.value == "question"
                                   for e in first_ambiguous)
    assert len({e.prompt.split("\n")[1] for e in big}) == 8  # eight orgs' system prompts


def test_a_share_of_tasks_teaches_the_edit_after_a_failed_attempt_and_a_complaint():
    plain = build_corpus(0, 40, 4, 8)
    corpus = build_corpus(0, 40, 4, 8, repair_rate=0.5)
    assert build_corpus(0, 40, 4, 8, repair_rate=0.5) == corpus
    assert [e for e in corpus if e.turn != "repair"] == plain     # the other turns do not move
    assert 0.35 < sum(e.turn == "repair" for e in corpus) / 160 < 0.65
    complaints = set(followups.WRONG + followups.BROKEN + followups.NEEDLESS)
    attempts = []
    for task in generate_tasks(0, 40, 4, 8):
        repair = examples_of(task, repair_rate=1.0)[-1]
        assert repair.turn == "repair"
        before = render(task.clarified_messages(task.question) if task.ambiguous else task.messages())
        conversation, attempt, complaint = repair.prompt.rsplit("<|user|>\n", 2)
        assert conversation + "<|user|>\n" + attempt.split("<|assistant|>\n")[0] + "<|assistant|>\n" == before
        attempts.append(attempt.split("<|assistant|>\n")[1].removesuffix("<|end|>\n"))
        assert complaint.removesuffix("\n<|assistant|>\n") in complaints
        # the reference is the edit, and it grades right on the task
        reference = parse_response(repair.completion.removesuffix(END))
        assert reference.kind.value == "edit" and grade(task, reference, clarified=True).correct
    assert all(a != task_edit for a, task_edit in zip(attempts, (t.edit.text() for t in generate_tasks(0, 40, 4, 8))))
    assert {"Which file do you mean?"} < set(attempts) and any(a.startswith("<tool_call>") for a in attempts)


def test_demonstrations_grade_correct_on_their_tasks():
    for task in generate_tasks(3, 5, 4, 4):
        clarified = task.ambiguous
        assert grade(task, parse_response(task.demonstration(clarified)), clarified=clarified).correct


def test_tokenizer_round_trips_and_its_chat_template_is_the_chat_format(corpus, tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok.chat_template == CHAT_TEMPLATE and tok.eos_token == END
    assert tok.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == list(range(len(SPECIAL_TOKENS)))
    assert len(tok) <= TINY.vocab_size
    for e in corpus[:20]:
        ids = tok(e.prompt + e.completion, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == e.prompt + e.completion
        assert ids[-1] == tok.eos_token_id and ids.count(tok.convert_tokens_to_ids("<|assistant|>")) >= 1
    unseen = "naïve 日本 \t emoji 🙂 {\"x\": [1, 2]}\r\n"  # bytes never seen in training still round-trip
    assert tok.decode(tok(unseen)["input_ids"]) == unseen
    task = generate_tasks(7, 3, 3, 2)[-1]
    convs = [task.messages(), task.clarified_messages("Which one?"),
             [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
              {"role": "assistant", "content": "a"}, {"role": "tool", "content": "ok"}]]
    for msgs in convs:
        for gen in (True, False):
            assert tok.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False) == render(msgs, gen)


def test_collate_masks_prompt_and_padding(tokenizer, corpus):
    data, dropped = sft.encode(tokenizer, corpus[:3], 512)
    assert dropped == 0
    ids, mask, labels = sft.collate(data, [0, 1, 2], tokenizer.pad_token_id)
    for row, ex in enumerate(data):
        n = len(ex.ids)
        assert ids[row, :n].tolist() == ex.ids and mask[row, :n].all() and not mask[row, n:].any()
        assert (labels[row, :ex.n_prompt] == sft.IGNORE).all() and (labels[row, n:] == sft.IGNORE).all()
        assert labels[row, ex.n_prompt:n].tolist() == ex.ids[ex.n_prompt:]
    _, dropped = sft.encode(tokenizer, corpus[:3], 10)
    assert dropped == 3


def test_loss_ignores_prompt_tokens_and_averages_completion_tokens():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[-100, -100, 3, 4, -100], [-100, 1, 2, 6, 5]])
    loss, n = sft.completion_loss(logits, labels)
    # position t predicts labels[t + 1]: rows 0 -> targets (3, 4) at positions 1, 2; row 1 -> (1, 2, 6, 5) at 0..3
    logp = torch.log_softmax(logits, -1)
    expected = -(logp[0, 1, 3] + logp[0, 2, 4] + logp[1, 0, 1] + logp[1, 1, 2] + logp[1, 2, 6] + logp[1, 3, 5]) / 6
    assert n == 6 and torch.allclose(loss, expected, atol=1e-6)
    changed = logits.clone()
    changed[0, 0] += 100.0  # the prediction at a prompt position (label -100 at t+1) carries no loss
    changed[0, 3:] += 100.0
    assert torch.allclose(sft.completion_loss(changed, labels)[0], loss, atol=1e-6)


def test_learning_rate_warms_up_then_decays_to_the_floor():
    lrs = [sft.lr_at(s, 100, 10, 0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] == pytest.approx(0.1, abs=1e-3)


def test_sft_steps_change_the_parameters_and_the_loss_falls(corpus, tokenizer):
    before, after, result = _train(corpus, tokenizer, steps=6)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert set(changed) == set(before)  # every tensor moved (tied embeddings are one tensor)
    assert result.steps == 6 and 6 < result.examples_seen <= 24 and result.completion_tokens > 0
    assert result.final_loss < result.first_loss


def test_two_runs_with_the_same_seed_give_the_same_weights(corpus, tokenizer):
    _, a, ra = _train(corpus, tokenizer, seed=3)
    _, b, rb = _train(corpus, tokenizer, seed=3)
    _, c, _ = _train(corpus, tokenizer, seed=4)
    assert all(torch.equal(a[k], b[k]) for k in a) and ra.log == [
        {**r, "elapsed_s": ra.log[i]["elapsed_s"]} for i, r in enumerate(rb.log)]
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_stop_ends_training_early_and_the_schedule_still_spans_all_steps(corpus, tokenizer):
    data, _ = sft.encode(tokenizer, corpus, TINY.max_position_embeddings)
    model = build_model(TINY, tokenizer, 0)
    seen = []
    result = sft.train(model, data, steps=100, batch_size=4, lr=1e-2, warmup_steps=1, min_lr_ratio=0.1,
                       weight_decay=0.1, grad_clip=1.0, seed=0, pad_id=tokenizer.pad_token_id, log_every=50,
                       log=lambda _: None, stop=lambda step: seen.append(step) or step == 3)
    assert result.steps == 3 and seen == [1, 2, 3] and result.log[-1]["step"] == 3
    assert result.log[-1]["lr"] > 0.009  # still near the peak: the cosine spans 100 steps


def test_evaluate_generates_for_every_turn_and_reports_both_decodings(corpus, tokenizer):
    from trainer.bootstrap.evaluate import evaluate

    tasks = generate_tasks(9, 2, 2, 2)
    result = evaluate(build_model(TINY, tokenizer, 0).eval(), tokenizer, tasks, max_new_tokens=4, batch_size=3,
                      seed=0, log=lambda _: None)
    n = len(turns_of(tasks))
    assert result.sampled.responses == result.greedy.responses == n and result.tasks == 4
    assert result.sampled.edit_accuracy == 0.0 and 0 < result.sampled.mean_completion_tokens <= 4
    assert json.loads(json.dumps(result.to_dict()))["greedy"]["responses"] == n
    only = evaluate(build_model(TINY, tokenizer, 0).eval(), tokenizer, tasks, max_new_tokens=4, batch_size=3,
                    seed=0, log=lambda _: None, greedy=False)
    assert only.greedy is None and only.sampled == result.sampled  # seeded sampling
    reused = evaluate(build_model(TINY, tokenizer, 0).eval(), tokenizer, tasks, max_new_tokens=4, batch_size=3,
                      seed=0, log=lambda _: None, sampled=only.sampled)    # measured before: not generated again
    assert reused.sampled is only.sampled and reused.greedy == result.greedy


def test_length_batches_group_similar_lengths_and_cover_every_example():
    data = [sft.Encoded([1] * n, 1) for n in random.Random(0).choices(range(5, 300), k=103)]
    batches = sft.length_batches(data, 8, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(103))
    spread = [max(len(data[i].ids) for i in b) - min(len(data[i].ids) for i in b) for b in batches]
    assert max(spread) < 60


def test_score_counts_right_edits_broken_calls_and_questions():
    tasks = generate_tasks(5, 30, 2, 4)
    turns = turns_of(tasks)
    amb = [t for t in turns if t.task.ambiguous and not t.clarified]
    assert amb, "the generator made no ambiguous task"
    perfect = [t.task.demonstration(t.clarified) for t in turns]
    m = score(turns, perfect, [1] * len(turns))
    assert m.edit_accuracy == 1.0 and m.broken_rate == 0.0 and m.question_rate_ambiguous == 1.0
    assert m.question_rate_clear == 0.0 and m.edit_turns == len(turns) - len(amb)
    broken = ['<tool_call>\n{"name": "edit_file"\n</tool_call>'] * len(turns)
    m = score(turns, broken, [1] * len(turns))
    assert m.broken_rate == 1.0 and m.malformed_rate == 1.0 and m.edit_accuracy == 0.0
    asks = ["Which one?"] * len(turns)
    m = score(turns, asks, [1] * len(turns))
    assert m.question_rate_clear == 1.0 and m.edit_accuracy == 0.0 and m.outcomes == {"question": len(turns)}


def test_repair_turns_are_scored_apart_from_the_first_and_clarified_turns():
    tasks = generate_tasks(5, 30, 2, 4)
    plain, turns = turns_of(tasks), turns_of(tasks, repairs=True)
    repairs = [t for t in turns if t.repair]
    assert len(repairs) == len(tasks) and [t for t in turns if not t.repair] == plain
    assert all(t.messages[-1]["role"] == "user" and t.messages[-2]["role"] == "assistant" for t in repairs)
    # the plain turns answered right, the repair turns with the empty call v0 used to give
    responses = ["<tool_call>" if t.repair else t.task.demonstration(t.clarified) for t in turns]
    m = score(turns, responses, [5] * len(turns))
    alone = score(plain, [t.task.demonstration(t.clarified) for t in plain], [5] * len(plain))
    assert m.repair_turns == len(tasks) and m.repair_accuracy == 0.0
    assert {**m.__dict__, "repair_turns": 0} == alone.__dict__      # the other rates do not see repair turns
    fixed = [t.task.demonstration(True) if t.repair else r for t, r in zip(turns, responses)]
    assert score(turns, fixed, [5] * len(turns)).repair_accuracy == 1.0


def test_right_edits_gives_one_paired_unit_per_edit_turn_whose_mean_is_the_edit_accuracy():
    turns = turns_of(generate_tasks(5, 30, 2, 4))
    responses = [t.task.demonstration(t.clarified) if i % 3 else "Which one?" for i, t in enumerate(turns)]
    units = right_edits(turns, responses)
    wants = [t for t in turns if t.wants_edit]
    assert [task_id for task_id, _ in units] == [t.task.task_id for t in wants]
    assert {r for _, r in units} == {0, 1}
    accuracy = score(turns, responses, [1] * len(turns)).edit_accuracy
    assert sum(r for _, r in units) / len(units) == pytest.approx(accuracy, abs=1e-4)


def test_checkpoint_folder_is_a_plain_llama_that_auto_classes_load(corpus, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.bootstrap.bootstrap import save_checkpoint, validate_checkpoint

    model = build_model(TINY, tokenizer, 0)
    save_checkpoint(model, tokenizer, tmp_path / "ckpt", {"kind": "test"})
    names = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "rtrl_metadata.json"} <= names
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["eos_token_id"] == tokenizer.eos_token_id
    assert config["vocab_size"] % 64 == 0 and config["vocab_size"] >= len(tokenizer)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt")
    assert n_parameters(loaded) == n_parameters(model)
    ids = torch.tensor([tokenizer(corpus[0].prompt)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path / "ckpt").chat_template == CHAT_TEMPLATE
    facts = validate_checkpoint(tmp_path / "ckpt")
    assert facts["architecture"] == "LlamaForCausalLM" and facts["eos_token"] == END


def test_validation_rejects_folders_that_cannot_be_the_policy(tokenizer, tmp_path):
    from trainer.bootstrap.bootstrap import BootstrapError, save_checkpoint, validate_checkpoint

    with pytest.raises(BootstrapError, match="not a directory"):
        validate_checkpoint(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BootstrapError, match="no config.json"):
        validate_checkpoint(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(BootstrapError, match="does not load as a causal language model"):
        validate_checkpoint(tmp_path / "bad")
    folder = tmp_path / "ckpt"
    save_checkpoint(build_model(TINY, tokenizer, 0), tokenizer, folder, {})
    (folder / "model.safetensors").rename(tmp_path / "weights")
    with pytest.raises(BootstrapError, match="no weights"):
        validate_checkpoint(folder)
    (tmp_path / "weights").rename(folder / "model.safetensors")
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(BootstrapError, match="no chat_template"):
        validate_checkpoint(folder)


def test_the_planted_copy_circuit_copies_repeated_text_before_any_training():
    """Random tokens, a gap, then the same tokens again: the untrained model predicts the repeat (induction)."""
    policy = PolicyConfig(hidden_size=128, heads=2, layers=2, intermediate_size=256)
    tok = type("Vocab", (), {"__len__": lambda self: 900, "eos_token_id": 4, "pad_token_id": 4})()
    g = torch.Generator().manual_seed(0)
    first = torch.randint(5, 900, (4, 80), generator=g)
    x = torch.cat([first, torch.randint(5, 900, (4, 120), generator=g), first], 1)  # repeat 200 positions later
    for circuit, (lo, hi) in ((True, (0.9, 1.0)), (False, (0.0, 0.05))):
        model = build_model(policy, tok, 0, copy_circuit=circuit).eval()
        with torch.no_grad():
            pred = model(input_ids=x).logits[:, 200:-1].argmax(-1)
        accuracy = float((pred == x[:, 201:]).float().mean())
        assert lo <= accuracy <= hi, (circuit, accuracy)


def test_the_planted_skip_bigram_head_copies_what_followed_the_previous_token_across_a_different_token():
    """`a s v` early, `a t` late (t never after a): the untrained model predicts v next. Induction alone has no
    bigram `a t` to match; this is "Set NAME to 43." copied into `NAME = 43`."""
    policy = PolicyConfig(hidden_size=128, heads=2, layers=2, intermediate_size=256)
    tok = type("Vocab", (), {"__len__": lambda self: 900, "eos_token_id": 4, "pad_token_id": 4})()
    g = torch.Generator().manual_seed(1)
    n, gap = 40, 60
    a, v = torch.randperm(800, generator=g)[:2 * n].add(100).view(2, n)     # distinct anchors and values
    s, t = torch.full((n,), 5), torch.full((n,), 6)                          # the two different middles
    early = torch.stack([a, s, v], 1).reshape(1, -1)                          # a0 s v0 a1 s v1 ...
    late = torch.stack([a, t], 1).reshape(1, -1)                              # a0 t a1 t ...
    x = torch.cat([early, torch.randint(100, 900, (1, gap), generator=g), late], 1)
    start = early.shape[1] + gap
    for circuit, (lo, hi) in ((True, (0.9, 1.0)), (False, (0.0, 0.05))):
        model = build_model(policy, tok, 0, copy_circuit=circuit).eval()
        with torch.no_grad():
            pred = model(input_ids=x).logits[0, start + 1::2].argmax(-1)     # after each t
        accuracy = float((pred == v).float().mean())
        assert lo <= accuracy <= hi, (circuit, accuracy)


def test_a_dev_check_over_the_target_stops_training_only_when_the_evaluation_tasks_confirm_it():
    from trainer.bootstrap.bootstrap import target_confirmed

    policy = PolicyConfig(target_accuracy=0.45, confirm_margin=0.05)
    asked = []

    def confirm(value):
        return lambda: asked.append(value) or value

    assert not target_confirmed(policy, 0.44, confirm(0.9)) and asked == []     # below the target: nothing asked
    assert not target_confirmed(policy, 0.51, confirm(0.365))   # a lucky dev check (the v0 of 2026-11-26's CPU)
    assert target_confirmed(policy, 0.51, confirm(0.40))        # at target - margin
    assert target_confirmed(policy, 0.45, confirm(0.48))
    assert asked == [0.365, 0.40, 0.48]
    unconfirmed = policy.model_copy(update={"confirm_margin": 1.0})
    assert target_confirmed(unconfirmed, 0.45, confirm(0.0)) and asked == [0.365, 0.40, 0.48]   # never asked


def test_policy_config_bounds():
    with pytest.raises(ValueError, match="not a multiple of heads"):
        PolicyConfig(hidden_size=100, heads=3)
    for eval_seed in (5, 4):
        with pytest.raises(ValueError, match="seed must differ from eval_seed"):
            PolicyConfig(seed=5, eval_seed=eval_seed)
    with pytest.raises(ValueError, match="copy_circuit needs"):
        PolicyConfig(hidden_size=64, heads=2)
    assert not PolicyConfig(hidden_size=64, heads=2, copy_circuit=False).copy_circuit


def test_a_cached_policy_stands_in_for_v0_only_when_made_from_the_same_policy_config_and_recipe(tmp_path):
    from trainer.bootstrap.bootstrap import METADATA, RECIPE, stale_reason

    assert "no policy" in stale_reason(tmp_path, TINY)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / METADATA).write_text(json.dumps({"kind": "bootstrap", "policy_config": TINY.model_dump()}))
    assert "made by bootstrap recipe 1" in stale_reason(tmp_path, TINY)      # before recipes were recorded
    (tmp_path / METADATA).write_text(json.dumps({"kind": "bootstrap", "policy_config": TINY.model_dump(),
                                                 "recipe": RECIPE - 1}))
    assert f"recipe {RECIPE - 1}" in stale_reason(tmp_path, TINY)
    (tmp_path / METADATA).write_text(json.dumps({"kind": "bootstrap", "policy_config": TINY.model_dump(),
                                                 "recipe": RECIPE}))
    assert stale_reason(tmp_path, TINY) == ""
    assert stale_reason(tmp_path, TINY.model_copy(update={"threads": 16, "log_every": 1})) == ""   # how it ran
    assert "repair_rate" in stale_reason(tmp_path, TINY.model_copy(update={"repair_rate": 0.9}))
    older = {k: v for k, v in TINY.model_dump().items() if k != "repair_rate"}    # made before the key existed:
    (tmp_path / METADATA).write_text(json.dumps({"kind": "bootstrap", "policy_config": older,   # as its default
                                                 "recipe": RECIPE}))
    assert TINY.repair_rate == PolicyConfig().repair_rate and stale_reason(tmp_path, TINY) == ""
    assert "repair_rate" in stale_reason(tmp_path, TINY.model_copy(update={"repair_rate": 0.25}))
    (tmp_path / METADATA).write_text("not json")
    assert "unreadable" in stale_reason(tmp_path, TINY)
    (tmp_path / METADATA).write_text(json.dumps({"kind": "base_checkpoint", "source": "/models/x"}))
    assert "not a bootstrapped default policy" in stale_reason(tmp_path, TINY)
    (tmp_path / METADATA).write_text(json.dumps({"kind": "bootstrap", "policy_config": TINY.model_dump(),
                                                 "recipe": RECIPE}))
    assert "base_checkpoint is set" in stale_reason(tmp_path, TINY.model_copy(update={"base_checkpoint": "/m"}))



def test_keeping_a_new_default_policy_replaces_the_whole_cache_and_leaves_no_copy_behind(tmp_path):
    from trainer.bootstrap.bootstrap import keep_as_default_policy

    cache, new = tmp_path / "policy-v0", tmp_path / "v1"
    cache.mkdir()
    (cache / "old.safetensors").write_text("old")
    new.mkdir()
    (new / "model.safetensors").write_text("new")
    keep_as_default_policy(new, cache)
    assert sorted(p.name for p in cache.iterdir()) == ["model.safetensors"]
    assert (cache / "model.safetensors").read_text() == "new" and (new / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy-v0", "v1"]


def test_house_rules_draw_each_workspaces_rule_so_an_org_id_says_nothing_about_it(tmp_path):
    from trainer.bootstrap.bootstrap import policy_cache

    tasks = generate_tasks(0, 64, 1, 4, house_rules=True)
    rules = {}
    for t in tasks:
        rules.setdefault(t.org_id, set()).add(", *, " in t.after if t.kind == "add_parameter" else None)
    assert all({True, False} <= seen for seen in rules.values()), rules   # both forms within every org
    assert generate_tasks(0, 64, 1, 4) != tasks and not any(", *, " in t.after for t in generate_tasks(0, 64, 1, 4))

    class Cfg:
        state_path = tmp_path
        policy = PolicyConfig(house_rules=True)
    assert policy_cache(Cfg) == tmp_path / "policy-v0-house-rules"      # never the plain v0's cache
    Cfg.policy = PolicyConfig()
    assert policy_cache(Cfg) == tmp_path / "policy-v0"
