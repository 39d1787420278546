"""`rtrl bench specialize`'s arithmetic: each org's users are found by index, and specialized -
shared is taken org by org on the same users, then pooled over every org with equal weights (an org left on the
shared champion counts, with its change of 0), and by inverse variance over the orgs an adapter serves."""

import math

import polars as pl
import pytest

from infra.learning.specialize import compare
from instrumentation.simulator.config import SimulatorConfig


def test_an_orgs_users_are_the_indexes_the_simulator_puts_in_it():
    sim = SimulatorConfig(users=10, orgs=4)
    assert sim.users_of("o1") == range(1, 10, 4)
    for k in range(4):
        assert all(sim.org(i % sim.orgs).org_id == f"o{k}" for i in sim.users_of(f"o{k}"))
    assert sum(len(sim.users_of(f"o{k}")) for k in range(4)) == 10
    assert sim.users_of("o7") == range(0) and sim.users_of("acme") == range(0)


def _units(rows: list[tuple[str, str, float, float]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["user_id", "org_id", "edit_persistence_rate_num", "edit_persistence_rate_den"],
                        orient="row")


SHARED = _units([("a", "o0", 1, 4), ("b", "o0", 2, 4), ("c", "o0", 1, 2),
                 ("d", "o1", 2, 4), ("e", "o1", 1, 4), ("f", "o1", 3, 4)])
SPECIALIZED = _units([("a", "o0", 3, 4), ("b", "o0", 2, 4), ("c", "o0", 2, 2),
                      ("d", "o1", 2, 4), ("e", "o1", 0, 4), ("f", "o1", 3, 4)])


def test_specialized_minus_shared_is_taken_within_each_org_and_pooled_over_the_orgs():
    out = compare(SHARED, SPECIALIZED, ["o0", "o1"])
    o0, o1 = out["by_org"]["o0"], out["by_org"]["o1"]
    assert o0["diff"] == pytest.approx(7 / 10 - 4 / 10) and o1["diff"] == pytest.approx(5 / 12 - 6 / 12)
    assert o0["paired_users"] == 3 == o1["paired_users"]
    pooled = out["pooled"]
    assert pooled["diff"] == pytest.approx((o0["diff"] + o1["diff"]) / 2)
    se = math.sqrt(o0["se"] ** 2 + o1["se"] ** 2) / 2
    assert pooled["ci_low"] == pytest.approx(pooled["diff"] - 1.959964 * se, rel=1e-5)
    assert pooled["orgs"] == 2 and out["orgs_won"] == 1
    w0, w1 = 1 / o0["se"] ** 2, 1 / o1["se"] ** 2
    pooled = out["pooled_specialized"]
    assert pooled["diff"] == pytest.approx((w0 * o0["diff"] + w1 * o1["diff"]) / (w0 + w1))
    assert pooled["ci_high"] - pooled["diff"] == pytest.approx(1.959964 / math.sqrt(w0 + w1), rel=1e-5)
    assert pooled["orgs"] == 2 and out["orgs_won"] == 1


def test_an_org_served_the_shared_champion_on_both_sides_adds_a_change_of_zero_to_the_pool():
    out = compare(SHARED, SHARED.filter(pl.col("org_id") == "o1").vstack(SPECIALIZED.filter(pl.col("org_id") == "o0")),
                  ["o0", "o1"])
    o0 = out["by_org"]["o0"]
    assert out["by_org"]["o1"]["diff"] == 0 and out["by_org"]["o1"]["se"] == 0
    assert out["pooled"]["orgs"] == 2 and out["pooled"]["diff"] == pytest.approx(o0["diff"] / 2)
    assert out["pooled"]["ci_high"] - out["pooled"]["diff"] == pytest.approx(1.959964 * o0["se"] / 2, rel=1e-5)
    spec = out["pooled_specialized"]
    assert spec["orgs"] == 1 and spec["diff"] == pytest.approx(o0["diff"])
    assert out["orgs_won"] == 1


def test_a_policy_scored_in_parts_takes_the_users_already_served_as_they_are():
    from infra.config import load_config
    from infra.learning.score import CURVE_METRICS, Scorer
    from pipelines.metrics.rates import den_col, num_col

    sums = {c: pl.lit(1.0) for m in CURVE_METRICS[1:] for c in (num_col(m), den_col(m))} | {"n": pl.lit(4)}
    served = SHARED.filter(pl.col("org_id") == "o1").with_columns(**sums)
    scorer = Scorer(load_config(None, []), seed=0)
    out = scorer.score_parts("specialized", [], served)
    assert scorer.units["specialized"].equals(served)
    assert out["summary"]["users"] == 3 and out["summary"]["edit_persistence_rate"] == pytest.approx(6 / 12)
