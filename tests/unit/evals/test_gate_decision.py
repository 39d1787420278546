"""The gate's decision on synthetic paired outcomes: worse candidates are rejected, equal ones accepted at the
power the power helper states, small or broken evaluations keep the champion, guardrails trip."""

import json
from dataclasses import replace

import numpy as np
import pytest

from evals.gate import TasksGateConfig, GateResult, decide
from evals.gate.power import ni_power, tasks_needed
from evals.records import Episode

K, TAU = 4, 0.3    # samples per task; sd of the per-task effect (makes the samples of a task correlated)


def truth(tau=TAU, shift=0.0, n=400_000, seed=99):
    """Discordant rate and ICC of the paired difference implied by `suite`'s task distribution."""
    rng = np.random.default_rng(seed)
    pc, ph = _task_rates(rng, n, tau, shift)
    disc = np.mean(pc * (1 - ph) + ph * (1 - pc))
    mu = pc - ph
    return float(disc), float(np.var(mu) / (disc - np.mean(mu) ** 2))


def _task_rates(rng, n_tasks, tau, shift):
    p = rng.beta(2, 2, size=n_tasks)
    e = rng.normal(0, tau, size=n_tasks)
    return np.clip(p + e / 2 + shift, 0, 1), np.clip(p - e / 2, 0, 1)


def suite(rng, n_tasks, k=K, tau=TAU, shift=0.0, **fields):
    """Episodes of both arms: each task has its own resolve rate, the candidate's is shifted by `shift` on average
    (per-task effects with sd `tau`). Other fields are the same in both arms unless given per arm as
    `name=(candidate_value, champion_value)`."""
    pc, ph = _task_rates(rng, n_tasks, tau, shift)
    eps = []
    for t in range(n_tasks):
        for s in range(k):
            for i, (arm, q) in enumerate((("candidate", pc[t]), ("champion", ph[t]))):
                extra = {name: (v[i](rng) if callable(v[i]) else v[i]) for name, v in fields.items()}
                eps.append(Episode(f"t{t:03d}", s, arm, category=f"cat{t % 3}", resolved=bool(rng.random() < q),
                                   **{"edited": True, "completion_tokens": 100, **extra}))
    return eps


def fixed(outcomes, **kw):
    """Episodes from explicit per-task [(candidate resolved, champion resolved), ...] lists."""
    return [Episode(f"t{t:03d}", s, arm, category=kw.get("category", "c"), resolved=bool(r), edited=True,
                    completion_tokens=100)
            for t, pairs in enumerate(outcomes) for s, pr in enumerate(pairs)
            for arm, r in zip(("candidate", "champion"), pr)]


CFG = TasksGateConfig(margin=0.1, bootstrap_resamples=100)


@pytest.mark.slow
def test_equal_candidate_is_promoted_at_the_power_the_helper_states():
    disc, icc = truth()
    n_tasks = tasks_needed(0.8, K, CFG.margin, CFG.confidence, disc, 0.0, icc)
    stated = ni_power(n_tasks, K, CFG.margin, CFG.confidence, disc, 0.0, icc)
    assert 30 <= n_tasks <= 300 and stated >= 0.8
    rng = np.random.default_rng(2024)
    runs = 400
    promoted = sum(decide(suite(rng, n_tasks), CFG).promote for _ in range(runs))
    # binomial sd at 0.8 over 400 runs is 0.02: the helper is neither optimistic nor needlessly pessimistic
    assert stated - 0.05 <= promoted / runs <= stated + 0.06


def test_clearly_worse_candidate_is_rejected_as_inferior():
    disc, icc = truth()
    n_tasks = tasks_needed(0.8, K, CFG.margin, CFG.confidence, disc, 0.0, icc)
    rng = np.random.default_rng(7)
    results = [decide(suite(rng, n_tasks, shift=-0.2), CFG) for _ in range(100)]
    assert not any(r.promote for r in results)
    assert sum(r.reasons == ["inferior"] for r in results) >= 95


def test_small_equal_sample_is_inconclusive_and_keeps_the_champion():
    # 12 tasks x 4, two discordant pairs each way: difference 0, but the interval is far wider than the margin
    outcomes = [[(1, 0), (0, 1), (1, 1), (0, 0)]] * 2 + [[(1, 1), (0, 0), (1, 1), (0, 0)]] * 10
    r = decide(fixed(outcomes), TasksGateConfig(margin=0.05, min_pairs=40, min_tasks=10))
    assert r.primary.difference == 0 and r.primary.lower < -0.05
    assert (r.decision, r.reasons) == ("keep_champion", ["inconclusive"])
    assert r.design.power_at_equal < 0.8 and r.design.tasks_needed > 12


def test_too_few_tasks_keep_the_champion_even_when_every_pair_agrees():
    r = decide(fixed([[(1, 1)] * 4] * 5), TasksGateConfig(min_tasks=10, min_pairs=4))
    assert r.decision == "keep_champion" and "too_few_pairs" in r.reasons
    assert decide(fixed([[(1, 1)] * 4]), CFG).primary is None     # one task: no interval at all


def test_identical_arms_on_a_large_suite_are_promoted_with_no_reason():
    r = decide(suite(np.random.default_rng(1), 200, tau=0.0, shift=0.0), CFG)
    assert r.primary.verdict == "non_inferior" and r.primary.lower > -CFG.margin
    assert (r.decision, r.reasons) == ("promote", [])


def _identical_big_suite(**fields):
    """A suite where both arms resolve the same pairs (non-inferiority certain) and differ only in `fields`."""
    rng = np.random.default_rng(5)
    eps = suite(rng, 100, tau=0.0, **fields)
    champ = {(e.task_id, e.sample): e.resolved for e in eps if e.arm == "champion"}
    return [replace(e, resolved=champ[(e.task_id, e.sample)]) for e in eps]


def _bern(p):
    return lambda rng: bool(rng.random() < p)


@pytest.mark.parametrize("name, fields", [
    ("broken_tool_calls", {"broken_tool_calls": (lambda rng: int(rng.random() < 0.3), lambda rng: 0)}),
    ("edit_rate", {"edited": (_bern(0.6), _bern(0.9))}),
    ("needless_questions", {"asked": (_bern(0.4), _bern(0.1))}),
    ("median_completion_tokens", {"completion_tokens": (lambda rng: int(rng.integers(140, 170)),
                                                        lambda rng: int(rng.integers(90, 110)))}),
])
def test_each_guardrail_violation_keeps_the_champion(name, fields):
    r = decide(_identical_big_suite(**fields), CFG)
    assert r.primary.verdict == "non_inferior"
    assert (r.decision, r.reasons) == ("keep_champion", [f"guardrail:{name}"])


@pytest.mark.parametrize("fields", [
    {"broken_tool_calls": (lambda rng: int(rng.random() < 0.01), lambda rng: 0)},     # +1 point, margin 2
    {"completion_tokens": (lambda rng: int(rng.integers(100, 106)), lambda rng: 100)},  # ~+3%, margin 10%
    {"edited": (_bern(0.2), _bern(0.2)), "asked": (_bern(0.8), _bern(0.8))},          # worse-looking but equal
])
def test_changes_within_the_guardrail_margins_do_not_block(fields):
    r = decide(_identical_big_suite(**fields), CFG)
    assert (r.decision, r.reasons) == ("promote", [])


def test_questions_on_ambiguous_tasks_do_not_trip_the_needless_question_guardrail():
    asks_more = _identical_big_suite(asked=(_bern(0.4), _bern(0.1)))
    ambiguous = [replace(e, ambiguous=True) for e in asks_more]
    r = decide(ambiguous, CFG)
    g = next(g for g in r.guardrails if g.name == "needless_questions")
    assert g.candidate == g.champion == 0.0
    assert (r.decision, r.reasons) == ("promote", [])
    assert decide(asks_more, CFG).reasons == ["guardrail:needless_questions"]    # the same questions on clear tasks


def _with_infra(eps, keys, arm):
    return [replace(e, infra_error="connection refused") if (e.task_id, e.sample) in keys and e.arm == arm else e
            for e in eps]


def test_infra_failures_drop_the_pair_from_both_arms():
    eps = suite(np.random.default_rng(11), 60)
    # the champion's infra failures fall exactly where the candidate failed: dropping only the champion's
    # episode would hide those candidate failures
    lost = sorted({(e.task_id, e.sample) for e in eps if e.arm == "candidate" and not e.resolved})[:12]
    r = decide(_with_infra(eps, set(lost), "champion"), CFG)
    clean = decide([e for e in eps if (e.task_id, e.sample) not in set(lost)], CFG)
    assert r.counts.valid_pairs == clean.counts.valid_pairs == 240 - 12
    assert r.counts.dropped_infra == 12 and r.counts.infra_episodes == {"candidate": 0, "champion": 12}
    assert r.primary == clean.primary and r.guardrails == clean.guardrails


def test_too_many_infra_failures_keep_the_champion():
    eps = _identical_big_suite()
    keys = sorted({(e.task_id, e.sample) for e in eps})
    ok = decide(_with_infra(eps, set(keys[:40]), "candidate"), CFG)            # 10% of 400: at the limit
    assert ok.decision == "promote"
    bad = decide(_with_infra(eps, set(keys[:41]), "candidate"), CFG)
    assert (bad.decision, bad.reasons) == ("keep_champion", ["infra_failures"])
    assert bad.counts.dropped_rate == pytest.approx(41 / 400)


def test_missing_episodes_count_as_lost_pairs():
    eps = _identical_big_suite()
    keys = sorted({(e.task_id, e.sample) for e in eps})[:50]
    r = decide([e for e in eps if not ((e.task_id, e.sample) in keys and e.arm == "champion")], CFG)
    assert r.counts.unpaired == 50 and r.reasons == ["infra_failures"]


def test_duplicate_or_foreign_episodes_are_refused():
    eps = fixed([[(1, 1)]] * 3)
    with pytest.raises(ValueError, match="two 'candidate' episodes"):
        decide(eps + [eps[0]], CFG)
    with pytest.raises(ValueError, match="arm 'control'"):
        decide(eps + [replace(eps[0], arm="control")], CFG)


def test_categories_and_worst_regressions_are_broken_down():
    outcomes = [[(0, 1), (0, 1), (1, 1)], [(0, 1), (1, 0), (1, 1)], [(1, 1), (1, 1), (1, 0)]]
    eps = fixed(outcomes)
    eps = [replace(e, category="a" if e.task_id == "t000" else "b") for e in eps]
    r = decide(eps, CFG)
    cats = {c.category: c for c in r.categories}
    assert (cats["a"].pairs, cats["a"].candidate_rate, cats["a"].champion_rate) == (3, pytest.approx(1 / 3), 1.0)
    assert (cats["b"].pairs, cats["b"].candidate_rate, cats["b"].champion_rate) == (6, pytest.approx(5 / 6),
                                                                                    pytest.approx(4 / 6))
    assert cats["a"].lower is None and cats["b"].lower is not None     # one task: no interval
    assert [(g.task_id, g.lost, g.gained, g.net) for g in r.regressions] == [("t000", [0, 1], [], 2),
                                                                           ("t001", [0], [1], 0)]


def test_result_is_strict_json_and_round_trips():
    r = decide(suite(np.random.default_rng(3), 30), CFG)
    doc = json.loads(r.to_json())
    assert doc["decision"] in ("promote", "keep_champion") and doc["primary"]["mcnemar_p"] <= 1
    assert GateResult.from_dict(doc) == r
    small = decide(fixed([[(1, 1)]]), CFG)          # no primary, no design: None, not NaN
    assert json.loads(small.to_json())["primary"] is None


def test_decision_is_reproducible():
    eps = suite(np.random.default_rng(4), 40, completion_tokens=(lambda rng: int(rng.integers(50, 150)),
                                                                lambda rng: int(rng.integers(50, 150))))
    assert decide(eps, CFG).to_dict() == decide(list(reversed(eps)), CFG).to_dict()


def _lineage_episodes(resolved: dict[str, set[int]], n_tasks: int) -> list[Episode]:
    """One episode per task and arm; arm `a` resolves the tasks in resolved[a]."""
    return [Episode(f"t{t:03d}", 0, arm, category="c", resolved=t in done, edited=True, completion_tokens=100,
                    policy_version=arm)
            for arm, done in resolved.items() for t in range(n_tasks)]


def test_a_chain_of_candidates_each_a_little_worse_is_refused_once_the_anchor_margin_is_spent():
    """Biocreep: each candidate loses 1.5 points to its parent, well inside the parent margin, so the parent test
    alone promotes all eight (12 points lost in all). With the anchor (v0) the margin is spent once: the lineage
    stops before it is shown to be more than anchor_margin below v0."""
    n, step = 400, 6                                   # 6 of 400 tasks lost per generation: 1.5 points
    v0 = set(range(0, n, 2))                           # v0 resolves half the tasks
    gens = [v0]
    for _ in range(8):
        gens.append(gens[-1] - set(sorted(gens[-1])[:step]))
    cfg = TasksGateConfig(margin=0.05, anchor_margin=0.05, min_pairs=40, min_tasks=10, bootstrap_resamples=100)

    without, with_anchor = [], []
    for j in range(1, len(gens)):
        arms = {"candidate": gens[j], "champion": gens[j - 1], "anchor": gens[0]}
        eps = _lineage_episodes(arms, n)
        parent_only = decide([e for e in eps if e.arm != "anchor"], cfg)
        assert parent_only.primary.verdict == "non_inferior" and parent_only.primary.difference == -step / n
        without.append(parent_only.promote)
        anchored = decide(eps, cfg, anchor="anchor")
        assert anchored.anchor is not None and anchored.anchor.margin == cfg.anchor_margin
        assert anchored.anchor.difference == pytest.approx(-j * step / n)
        assert anchored.anchor_versions == ["anchor"] and anchored.champion_versions == ["champion"]
        with_anchor.append(anchored.promote)
        if not anchored.promote:
            assert anchored.reasons == [f"anchor:{anchored.anchor.verdict}"]

    assert all(without), "the parent test alone lets the whole chain through"
    # 1.5 and 3 points below v0 are shown to be within 5; at 4.5 the interval reaches past the margin: refused,
    # and every later (worse) candidate too. What was promoted stayed within the anchor margin of v0.
    assert with_anchor == [True, True] + [False] * 6, with_anchor
    assert len(gens[0] - gens[2]) / n <= cfg.anchor_margin


def test_an_anchor_arm_without_pairs_keeps_the_champion():
    eps = _lineage_episodes({"candidate": set(range(0, 100, 2)), "champion": set(range(0, 100, 2))}, 100)
    result = decide(eps, TasksGateConfig(bootstrap_resamples=100), anchor="anchor")
    assert result.anchor is None and result.reasons == ["anchor:inconclusive"] and not result.promote
    assert GateResult.from_dict(json.loads(result.to_json())).reasons == ["anchor:inconclusive"]
