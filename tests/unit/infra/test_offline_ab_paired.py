"""`infra.offline_ab.paired_difference`: the interval pairs each simulated user's rows under two checkpoints."""

import pytest

from infra.offline_ab import paired_difference
from pipelines.metrics.intervals import moments, moments_of, ratio_change
from pipelines.metrics.rates import unit_stats
from tests.unit.metrics.helpers import frame, row


def _rows(per_user: dict[str, tuple[int, int]], arm: str = "control"):
    """Rows whose edit persistence gives user u the sums (kept, attempts): `kept` edits persist 1, the rest 0."""
    return frame([row(u, arm, persistence=1.0 if j < kept else 0.0, minute=j)
                  for u, (kept, n) in per_user.items() for j in range(n)])


def test_paired_difference_by_hand():
    # base: a 1/2, b 1/2 -> r 0.5; other: a 2/2, b 1/2 -> r 0.75; nbar 2 on both sides
    # d_a = (2 - 0.75 * 2) / 2 - 0 = 0.25, d_b = (1 - 1.5) / 2 - 0 = -0.25; s^2(d) = 0.125; Var = 0.125 / 2
    d = paired_difference(_rows({"a": (1, 2), "b": (1, 2)}), _rows({"a": (2, 2), "b": (1, 2)}), "edit_persistence_rate")
    half = 1.959963984540054 * (0.125 / 2) ** 0.5
    assert d["diff"] == pytest.approx(0.25) and d["paired_users"] == 2
    assert (d["ci_low"], d["ci_high"]) == (pytest.approx(0.25 - half), pytest.approx(0.25 + half))


def test_pairing_removes_the_users_own_spread_that_an_independent_interval_keeps():
    # 40 users from 10% to 88% persistence; the other checkpoint keeps one more edit of 10 for every user
    base = {f"u{i}": (1 + i // 5, 10) for i in range(40)}
    other = {u: (k + 1, n) for u, (k, n) in base.items()}
    paired = paired_difference(_rows(base), _rows(other), "edit_persistence_rate")
    units = unit_stats(frame([*_rows(base).to_dicts(), *_rows(other, "treatment").to_dicts()]).lazy()).collect()
    mom = moments(units, "edit_persistence_rate", ["arm"])
    _, _, lo, hi, _ = ratio_change(moments_of(mom, arm="control"), moments_of(mom, arm="treatment"), 0.05).on("absolute")
    assert paired["diff"] == pytest.approx(0.1)
    assert paired["ci_low"] == pytest.approx(0.1) and paired["ci_high"] == pytest.approx(0.1)  # no spread left
    assert lo < 0.0 < hi                                     # independent arms: the users' spread hides it


def test_a_user_seen_under_one_checkpoint_only_counts_with_zero_sums_on_the_other_side():
    d = paired_difference(_rows({"a": (1, 2), "b": (2, 2)}), _rows({"a": (1, 2), "c": (0, 2)}), "edit_persistence_rate")
    assert d["paired_users"] == 3 and d["diff"] == pytest.approx(0.25 - 0.75)
    assert d["ci_low"] < d["diff"] < d["ci_high"]
