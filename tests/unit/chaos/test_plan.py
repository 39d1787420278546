"""The fault plan: seeded, as long as asked, every fault type covered, expensive faults capped."""

from __future__ import annotations

from collections import Counter

import pytest

from infra.chaos.plan import EXPENSIVE, FAULT_TYPES, FLOODS, JOBS, SERVICES, make_plan, type_counts


def test_the_same_seed_gives_the_same_plan_and_another_seed_a_different_one():
    assert make_plan(7, 20) == make_plan(7, 20)
    assert make_plan(7, 20) != make_plan(8, 20)


@pytest.mark.parametrize("n", [1, 5, 9, 20, 57])
def test_a_plan_has_exactly_the_faults_asked_for_indexed_in_order(n):
    plan = make_plan(0, n)
    assert len(plan) == n
    assert [f.index for f in plan] == list(range(n))


@pytest.mark.parametrize("seed", range(5))
def test_twenty_faults_cover_every_fault_type(seed):
    kinds = Counter(f.kind for f in make_plan(seed, 20))
    assert set(kinds) == set(FAULT_TYPES)


def test_expensive_faults_stay_within_their_share_of_a_long_plan():
    counts = type_counts(100, seed=3)
    for kind, share in EXPENSIVE.items():
        assert 1 <= counts[kind] <= int(100 * share)
    assert sum(counts.values()) == 100


def test_a_plan_shorter_than_the_type_list_takes_cheap_faults_first():
    kinds = {f.kind for f in make_plan(0, 6)}
    assert len(kinds) == 6
    assert not kinds & set(EXPENSIVE)


def test_only_the_requested_types_are_planned():
    plan = make_plan(1, 12, types=("broker", "duplicates"))
    assert {f.kind for f in plan} == {"broker", "duplicates"}


def test_unknown_fault_types_and_empty_plans_are_refused():
    with pytest.raises(ValueError, match="unknown fault types"):
        make_plan(0, 5, types=("broker", "meteor"))
    with pytest.raises(ValueError, match="at least one"):
        make_plan(0, 0)


def test_each_fault_carries_the_parameters_of_its_kind_within_bounds():
    for f in make_plan(2, 40, gap_s=(1.0, 2.0), downtime_s=(3.0, 4.0), flood_size=(10, 20)):
        assert 1.0 <= f.gap_s <= 2.0
        assert (3.0 <= f.downtime_s <= 4.0) if f.kind in SERVICES else f.downtime_s == 0
        assert (f.kill_after_s > 0) if f.kind in JOBS else f.kill_after_s == 0
        assert (10 <= f.size <= 20) if f.kind in FLOODS else f.size == 0
