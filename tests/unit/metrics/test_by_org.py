"""Specialized against shared by org (pipelines/metrics/by_org.py): per-org changes with the A/B table's interval
and their inverse-variance pooled mean; hand-derived values."""

from __future__ import annotations

import math

import polars as pl
import pytest

from pipelines.metrics.by_org import by_org, wins
from pipelines.metrics.intervals import Moments, ratio_change


def _units(cells):
    """cells: (org, arm, [(persisted, attempts) per user])."""
    rows = []
    for org, arm, users in cells:
        for i, (y, n) in enumerate(users):
            rows.append({"org_id": org, "arm": arm, "user_id": f"{org}-{arm}-{i}", "policy_version": "1", "n": n,
                         "edit_persistence_rate_num": float(y), "edit_persistence_rate_den": float(n)})
    return pl.DataFrame(rows)


def _moments(users):
    ys, ns = [float(y) for y, _ in users], [float(n) for _, n in users]
    return Moments(len(users), sum(ys), sum(ns), sum(y * y for y in ys), sum(n * n for n in ns),
                   sum(y * n for y, n in zip(ys, ns)))


A_SHARED, A_SPEC = [(1, 4), (2, 4), (1, 3)], [(3, 4), (3, 4), (2, 3)]
B_SHARED, B_SPEC = [(2, 5), (3, 5)], [(2, 5), (4, 5), (3, 5)]


def test_each_orgs_change_and_the_pooled_change_by_hand():
    units = _units([("a", "treatment", A_SHARED), ("a", "specialized", A_SPEC), ("b", "treatment", B_SHARED),
                    ("b", "specialized", B_SPEC), ("a", "control", [(0, 4), (0, 4)])])
    r = by_org(units, "edit_persistence_rate")
    ca = ratio_change(_moments(A_SHARED), _moments(A_SPEC), 0.05)
    cb = ratio_change(_moments(B_SHARED), _moments(B_SPEC), 0.05)
    assert r["orgs"]["a"]["diff"] == pytest.approx(8 / 11 - 4 / 11)
    assert r["orgs"]["b"]["diff"] == pytest.approx(9 / 15 - 5 / 10)
    assert r["orgs"]["a"]["users"] == {"treatment": 3, "specialized": 3}
    assert (r["orgs"]["a"]["ci_low"], r["orgs"]["a"]["ci_high"]) == pytest.approx(ca.on("absolute")[2:4])
    wa, wb = 1 / ca.on("absolute")[1], 1 / cb.on("absolute")[1]
    pooled = (wa * ca.absolute + wb * cb.absolute) / (wa + wb)
    se = math.sqrt(1 / (wa + wb))
    assert r["pooled"]["diff"] == pytest.approx(pooled) and r["pooled"]["orgs"] == 2
    assert r["pooled"]["ci_low"] == pytest.approx(pooled - 1.959964 * se, abs=1e-5)
    assert wins(r) == 2


def test_an_org_with_one_arm_only_has_no_change_and_stays_out_of_the_pool():
    units = _units([("a", "treatment", A_SHARED), ("a", "specialized", A_SPEC), ("c", "treatment", [(1, 2), (1, 2)])])
    r = by_org(units, "edit_persistence_rate")
    assert r["orgs"]["c"]["diff"] is None and r["orgs"]["c"]["users"] == {"treatment": 2, "specialized": 0}
    assert r["pooled"]["orgs"] == 1 and r["pooled"]["diff"] == pytest.approx(r["orgs"]["a"]["diff"])


def test_each_org_has_the_ab_tables_srm_check_and_always_valid_intervals():
    from pipelines.metrics import sequential
    from pipelines.metrics.srm import srm_check

    units = _units([("a", "treatment", A_SHARED), ("a", "specialized", A_SPEC), ("b", "treatment", B_SHARED),
                    ("b", "specialized", B_SPEC)])
    r = by_org(units, "edit_persistence_rate", shares={"treatment": 0.4, "specialized": 0.4}, tau=0.05)
    assert r["orgs"]["b"]["srm"] == srm_check({"treatment": 2, "specialized": 3},
                                              {"treatment": 0.4, "specialized": 0.4}).to_dict()
    assert r["orgs"]["b"]["srm"]["expected"] == {"treatment": 2.5, "specialized": 2.5}
    ca = ratio_change(_moments(A_SHARED), _moments(A_SPEC), 0.05)
    assert (r["orgs"]["a"]["seq_low"], r["orgs"]["a"]["seq_high"]) == pytest.approx(
        sequential.interval(ca.absolute, ca.on("absolute")[1], 0.05 * 4 / 11, 0.05))
    a, p = r["orgs"]["a"], r["pooled"]
    assert a["seq_low"] < a["ci_low"] and a["seq_high"] > a["ci_high"], "always valid: wider than the fixed one"
    assert p["seq_low"] < p["ci_low"] < p["diff"] < p["ci_high"] < p["seq_high"]
    assert "srm" not in by_org(units, "edit_persistence_rate")["orgs"]["a"]
