"""The learning curve's arithmetic over seeds (infra/learning/curve.py), on hand-made lineages."""

import math

import pytest

from infra.learning.curve import last_vs_first, mean_interval, points, seed_slope, slope, summarize


def _cycle(c: int, score: float | None, decision: str = "promote", champion: str = "") -> dict:
    if score is None:
        return {"cycle": c, "champion": champion or "1", "decision": decision, "score": {}}
    s = {"edit_persistence_rate": {"diff": score, "ci_low": score - 0.01, "ci_high": score + 0.01, "se": 0.005}}
    return {"cycle": c, "champion": champion or str(c + 1), "decision": decision, "score": s}


def _lineage(seed: int, scores: list[float | None], last_vs_first: dict | None = None) -> dict:
    out = {"seed": seed, "cycles": [_cycle(i + 1, s, "promote" if s is not None else "keep_champion")
                                    for i, s in enumerate(scores)]}
    if last_vs_first is not None:
        out["last_vs_first"] = {"edit_persistence_rate": last_vs_first}
    return out


def test_a_kept_champion_repeats_the_previous_point_and_v0_has_none():
    pts = points(_lineage(0, [None, 0.02, None, 0.05]))
    assert pts[0] is None and pts[1]["diff"] == 0.02 and pts[2] is pts[1] and pts[3]["diff"] == 0.05


def test_the_slope_is_least_squares_from_v0_at_cycle_zero():
    assert slope([0, 1, 2], [0, 1, 2]) == pytest.approx(1.0)
    assert slope([1], [3]) is None
    # points (0,0) (1,0.02) (2,0.04) (3,0.06): exactly 0.02 per cycle
    assert seed_slope(_lineage(0, [0.02, 0.04, 0.06])) == pytest.approx(0.02)
    # v0 kept for two cycles, then +0.06: (0,0) (1,0) (2,0) (3,0.06) -> slope 0.018
    assert seed_slope(_lineage(0, [None, None, 0.06])) == pytest.approx(0.018)


def test_the_mean_over_seeds_has_a_t_interval():
    m = mean_interval([0.01, 0.02, 0.03])
    half = 4.302653 * 0.01 / math.sqrt(3)        # t(0.975, 2) * sd / sqrt(3)
    assert m["mean"] == pytest.approx(0.02) and m["ci_high"] - m["mean"] == pytest.approx(half, rel=1e-5)
    assert mean_interval([0.5])["ci_low"] is None and mean_interval([])["mean"] is None


def test_last_against_first_pools_independent_seeds():
    lins = [_lineage(0, [0.02, 0.05], {"diff": 0.03, "se": 0.01}), _lineage(1, [0.01, 0.04], {"diff": 0.01, "se": 0.02}),
            _lineage(2, [None, 0.03])]     # promoted once: no difference of its own
    out = last_vs_first(lins)
    assert [s["diff"] for s in out["per_seed"]] == [0.03, 0.01, None]
    pooled = out["pooled"]
    se = math.sqrt(0.01 ** 2 + 0.02 ** 2) / 2
    assert pooled["diff"] == pytest.approx(0.02) and pooled["se"] == pytest.approx(se) and pooled["seeds"] == 2
    assert pooled["ci_low"] == pytest.approx(0.02 - 1.959964 * se, abs=1e-6)


def test_summarize_lists_each_seeds_champion_per_cycle():
    out = summarize([_lineage(0, [0.02, None]), _lineage(1, [None, 0.03])], cycles=2)
    c1, c2 = out["per_cycle"]
    assert [s["vs_v0"] and s["vs_v0"]["edit_persistence_rate"]["diff"] for s in c1["seeds"]] == [0.02, None]
    assert [s["decision"] for s in c2["seeds"]] == ["keep_champion", "promote"]
    assert c2["seeds"][0]["vs_v0"]["edit_persistence_rate"]["diff"] == 0.02      # kept: the cycle-1 champion
    assert out["slope_persistence_per_cycle"]["n"] == 2
