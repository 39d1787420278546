"""The trainer on a tiny random Llama with DeepSpeed (CPU): parameters change in the rewarded direction,
runs are deterministic, micro-batch splits do not change the update, a killed run resumes to the same weights from
the one step checkpoint it keeps."""

import polars as pl
import pytest
import torch
from safetensors.torch import load_file

from tests.unit.trainer.tiny import sampled_rows, small_trainer_config, tiny_checkpoint
from trainer.train import Trainer

pytestmark = pytest.mark.slow


_cfg = small_trainer_config


def _run(parent, run_dir, crash_after: int | None = None, **kw):
    folder, rows = parent

    def on_step(m):
        if crash_after is not None and m.step == crash_after:
            raise KeyboardInterrupt("killed")

    t = Trainer(_cfg(**kw), rows, folder, run_dir, on_step=on_step)
    t.setup()
    t.train()
    out = t.save_checkpoint({"parent": "1"})
    return load_file(out / "model.safetensors"), t.summary


def _close(a, b, tol):
    return all(torch.allclose(a[k], b[k], atol=tol, rtol=0) for k in a)


def test_parameters_change_and_rewarded_first_tokens_become_likelier(parent, tmp_path):
    folder, rows = parent
    before = load_file(folder / "model.safetensors")
    after, summary = _run(parent, tmp_path / "run")
    assert summary.steps == 3 and summary.rows == 48 and len(summary.history) == 3
    assert not _close(before, after, 1e-6)
    from transformers import AutoModelForCausalLM

    def mean_even_mass(weights_dir):
        m = AutoModelForCausalLM.from_pretrained(weights_dir, dtype=torch.float32).eval()
        with torch.no_grad():
            probs = [torch.softmax(m(input_ids=torch.tensor([p])).logits[0, -1], -1)
                     for p in rows["prompt_token_ids"].to_list()]
        return float(torch.stack([p[0::2].sum() for p in probs]).mean())

    assert mean_even_mass(tmp_path / "run" / "checkpoint") > mean_even_mass(folder) + 0.01
    # only the above-baseline rows push (the default negative_weight 0): the same direction, about half the move
    _run(parent, tmp_path / "positive", negative_weight=0.0)
    assert mean_even_mass(tmp_path / "positive" / "checkpoint") > mean_even_mass(folder) + 0.003
    h = summary.history[0]
    assert h.mismatch < 1e-4 and h.tis_weight_mean == pytest.approx(1.0, abs=1e-3) and h.grad_norm is not None


def test_same_seed_same_weights_and_micro_batch_split_does_not_change_the_update(parent, tmp_path):
    a, _ = _run(parent, tmp_path / "a")
    b, _ = _run(parent, tmp_path / "b")
    c, _ = _run(parent, tmp_path / "c", micro_batch=8)
    assert _close(a, b, 0.0)
    # Different micro-batches pad differently, so matmuls reduce in another order (float32 noise ~1e-7 in the
    # gradients, exactly equal in exact arithmetic: test_losses); Adam's normalization lifts that to ~2e-6 in the
    # weights, against an update of ~1.5e-2.
    assert _close(a, c, 1e-5)


def test_a_run_killed_mid_way_resumes_to_the_same_weights(parent, tmp_path):
    full, _ = _run(parent, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        _run(parent, tmp_path / "resumed", crash_after=2)
    steps = tmp_path / "resumed" / "steps"      # a checkpoint after each step: only the newest is kept
    assert sorted(p.name for p in steps.iterdir() if p.is_dir()) == ["step2"]
    assert (steps / "latest").read_text() == "step2"
    resumed, summary = _run(parent, tmp_path / "resumed")
    assert summary.resumed_from_step == 2
    assert _close(full, resumed, 1e-6)


def test_head_on_completion_positions_gives_the_full_logits_log_probs(parent):
    from transformers import AutoModelForCausalLM

    from trainer.data import build_micro_batch
    from trainer.logprobs import naive_token_logprobs

    folder, rows = parent
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    mb = build_micro_batch(rows.head(5), torch.zeros(5), pad_id=0)
    t = Trainer(_cfg(), rows, folder, folder)
    lp, ent = t._logprobs(model, mb, grad=False)
    with torch.no_grad():
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
        ref_lp, ref_ent = naive_token_logprobs(logits.reshape(-1, logits.shape[-1]), mb.targets.reshape(-1))
    keep = mb.mask.bool()
    torch.testing.assert_close(lp[keep], ref_lp.reshape(mb.mask.shape)[keep], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent[keep], ref_ent.reshape(mb.mask.shape)[keep], atol=1e-5, rtol=1e-5)
    assert (lp[~keep] == 0).all()


def test_parent_mode_recomputes_theta_old_and_the_kl_to_the_parent_grows_from_zero(parent, tmp_path):
    _, summary = _run(parent, tmp_path / "p", old_logprobs="parent", kl_coef=0.05, kl_estimator="k3")
    kls = [m.kl for m in summary.history]
    assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[-1] > 1e-6
    assert summary.history[0].mismatch < 1e-4
    # step 1's policy is the parent (theta_old): no ratio leaves the clip range; later ones are shares of tokens
    assert summary.history[0].clipped_fraction == 0.0 and all(0 <= m.clipped_fraction <= 1 for m in summary.history)


def test_baseline_strata_come_from_the_configured_column_and_an_unknown_one_is_refused(parent, tmp_path):
    folder, rows = parent
    orgs = rows.with_columns(org_id=pl.Series([f"org{i % 3}" for i in range(rows.height)]))
    one = Trainer(_cfg(), orgs, folder, tmp_path / "a")
    one.setup()
    split = Trainer(_cfg(stratify_by="org_id"), orgs, folder, tmp_path / "b")
    split.setup()
    assert not torch.allclose(one.adv, split.adv)
    for t in (one, split):  # random prompts, no groups: leave-one-out advantages sum to zero within each stratum
        strata = t.rows["org_id"].to_list() if t is split else [""] * t.rows.height
        for s in set(strata):
            assert abs(float(sum(a for a, k in zip(t.adv.tolist(), strata) if k == s))) < 1e-4
    with pytest.raises(ValueError, match="no column 'task_kind'"):
        Trainer(_cfg(stratify_by="task_kind"), rows, folder, tmp_path / "c").setup()


def test_samples_of_one_request_share_a_group_mean_baseline_from_their_group_id(parent, tmp_path):
    folder, rows = parent
    grouped = rows.with_columns(group_id=pl.Series([f"req{i // 4}" for i in range(rows.height)]))
    t = Trainer(_cfg(), grouped, folder, tmp_path / "g")
    t.setup()
    by_group: dict[str, list[float]] = {}
    for g, a in zip(t.rows["group_id"].to_list(), t.adv.tolist()):
        by_group.setdefault(g, []).append(a)
    assert len(by_group) == rows.height // 4
    for g, advs in by_group.items():      # reward minus the mean of the request's own four samples
        rewards = grouped.filter(pl.col("group_id") == g)["reward"]
        assert sum(advs) == pytest.approx(0.0, abs=1e-5) and max(advs) == pytest.approx(rewards.max() - rewards.mean())


def test_rows_whose_loss_term_is_zero_are_not_run_and_the_update_is_the_same(parent, tmp_path):
    skipped, s1 = _run(parent, tmp_path / "skip", negative_weight=0.0)
    full, s2 = _run(parent, tmp_path / "full", negative_weight=0.0, skip_inert_rows=False)
    assert s1.inert_rows > 10 and s2.inert_rows == 0
    assert s1.tokens < s2.tokens                       # the below-baseline rows' tokens were not run
    assert [m.reward_mean for m in s1.history] == [m.reward_mean for m in s2.history]   # over all rows of a step
    assert _close(skipped, full, 1e-5)                 # float32 summation order only (see the micro-batch test)
    # with a KL term every row carries gradient: nothing is skipped
    _, s3 = _run(parent, tmp_path / "kl", negative_weight=0.0, kl_coef=0.05)
    assert s3.inert_rows == 0


def test_a_step_whose_rows_all_have_zero_loss_still_steps_the_optimizer():
    from trainer.data import steps

    plan = steps(20, 8, 3, active=[5, 0, 4])
    assert [(s.start, s.end) for s in plan] == [(0, 8), (8, 16), (16, 20)]
    assert plan[0].micro == [(0, 3), (3, 5)] and plan[2].micro == [(16, 19), (19, 20)]
    assert plan[1].micro == [(8, 11)] and plan[1].rows == 8      # one micro-batch of zero loss: Adam still steps
    assert [s.micro for s in steps(5, 4, 2)] == [[(0, 2), (2, 4)], [(4, 5)]]


def test_negative_tokens_make_below_baseline_rows_carry_gradient_and_move_the_policy(parent, tmp_path):
    only_up, s1 = _run(parent, tmp_path / "up", negative_weight=0.0)
    decision, s2 = _run(parent, tmp_path / "decision", negative_weight=0.0, negative_tokens=1)
    assert s1.inert_rows > 10 and s2.inert_rows < s1.inert_rows   # below-baseline rows now push their first token
    assert not _close(only_up, decision, 1e-5)


def test_negative_kinds_push_down_below_baseline_rows_of_those_kinds_only(parent, tmp_path):
    folder, rows = parent
    kinds = rows.with_columns(response_kind=pl.Series(["question" if i % 3 == 0 else "edit"
                                                       for i in range(rows.height)]))
    plain = Trainer(_cfg(negative_weight=0.0), kinds, folder, tmp_path / "plain")
    plain.setup()
    asked = Trainer(_cfg(negative_weight=0.0, negative_kinds=["question"]), kinds, folder, tmp_path / "asked")
    asked.setup()
    # rows are reordered within steps by which ones carry gradient: compare them by request id
    before = dict(zip(plain.rows["request_id"].to_list(), plain.adv.tolist()))
    after = dict(zip(asked.rows["request_id"].to_list(), asked.adv.tolist()))
    kind = dict(zip(asked.rows["request_id"].to_list(), asked.rows["response_kind"].to_list()))
    assert min(before.values()) >= 0                                  # negative_weight 0: nothing pushes down
    assert all(after[r] == before[r] for r in kind if kind[r] == "edit")         # edits: unchanged
    below = [r for r in kind if kind[r] == "question" and after[r] < 0]
    assert below and all(before[r] == 0 for r in below)              # below-baseline questions now push down
    assert all(after[r] == before[r] for r in kind if kind[r] == "question" and r not in below)
    assert asked.summary.inert_rows == plain.summary.inert_rows - len(below)


def test_the_broken_kind_pushes_down_below_baseline_rows_with_a_broken_tool_call(parent, tmp_path):
    folder, rows = parent
    marked = rows.with_columns(broken_tool_calls=pl.Series([1 if i % 4 == 0 else 0 for i in range(rows.height)]),
                               response_kind=pl.lit("edit"))
    plain = Trainer(_cfg(negative_weight=0.0), marked, folder, tmp_path / "plain")
    plain.setup()
    pushed = Trainer(_cfg(negative_weight=0.0, negative_kinds=["broken"]), marked, folder, tmp_path / "broken")
    pushed.setup()
    before = dict(zip(plain.rows["request_id"].to_list(), plain.adv.tolist()))
    after = dict(zip(pushed.rows["request_id"].to_list(), pushed.adv.tolist()))
    broken = dict(zip(pushed.rows["request_id"].to_list(), (pushed.rows["broken_tool_calls"] > 0).to_list()))
    down = [r for r in after if after[r] < 0]
    assert down and all(broken[r] and before[r] == 0 for r in down)   # only broken rows push down, in full
    assert all(after[r] == before[r] for r in after if not broken[r])
    with pytest.raises(ValueError, match="unknown kind"):
        _cfg(negative_kinds=["broken", "malformed"])


def test_frozen_parameters_keep_the_parents_values_and_a_tied_head_stays_with_its_embedding(tmp_path):
    folder = tiny_checkpoint(tmp_path / "tied", tied=True)
    rows = sampled_rows(folder, 32)
    before = load_file(folder / "model.safetensors")
    after, summary = _run((folder, rows), tmp_path / "run", frozen=["lm_head.weight"])
    assert summary.frozen_parameters == ["model.embed_tokens.weight"]   # the head is the embedding's tensor
    assert torch.equal(after["model.embed_tokens.weight"], before["model.embed_tokens.weight"])
    moved = [k for k in before if k != "model.embed_tokens.weight" and not torch.equal(after[k], before[k])]
    assert "model.layers.0.self_attn.q_proj.weight" in moved and "model.norm.weight" in moved
    with pytest.raises(ValueError, match="names no parameter"):
        Trainer(_cfg(frozen=["model.embed*", "no.such.*"]), rows, folder, tmp_path / "bad").setup()
