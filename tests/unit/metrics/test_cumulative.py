"""The cumulative A/B result is updated incrementally (pipelines/metrics/cumulative.py): each cycle adds its own
per-user sums and latency counts to the totals the previous cycle keeps, and every cumulative figure (always-valid
interval and p-value, cumulative values, the cumulative SRM check) equals the full recomputation over every
cycle's stored sums, cycle after cycle, without reading the cycles before the previous one; retention folds old
cycles' sums into running totals, and a cycle that keeps its own is still measured again exactly."""

from __future__ import annotations

import polars as pl
import pytest

from pipelines.metrics import sequential
from pipelines.metrics.catalog import METRICS
from pipelines.metrics.config import AbConfig
from pipelines.metrics.cycle import _changes, _tau, compute_cycle_metrics
from pipelines.metrics.demo import DemoSpec, Effects, demo_rows
from pipelines.metrics.srm import srm_check
from pipelines.metrics.store import MetricsStore, frames_to_fold

CFG = AbConfig()
SPEC = DemoSpec(users=240, effects=Effects(persistence=0.05, latency=-0.1))
CYCLES = 5


@pytest.fixture(scope="module")
def cycles():
    return [demo_rows(2500, cycle=k, spec=SPEC, full_schema=False) for k in range(CYCLES)]


def _full_recomputation(units: list[pl.DataFrame], hists: list[pl.DataFrame]) -> list[dict]:
    """What measuring did before the totals: every earlier cycle's unit stats and histogram concatenated with
    this cycle's, each cycle; the always-valid figures from them, the p-value's running minimum over cycles."""
    out, p_min = [], {}
    for k in range(len(units)):
        all_units, all_hists = pl.concat(units[:k + 1], how="vertical_relaxed"), pl.concat(hists[:k + 1])
        cum = _changes(all_units, all_hists, "control", "treatment", CFG, seed_offset=1 if k else 0)
        figures = {}
        for info in METRICS:
            c = cum[info.name]
            est, var, _, _, _ = c.on(info.scale)
            tau = _tau(info, c, CFG)
            p = sequential.p_value(est, var, tau)
            if p is not None and p_min.get(info.name) is not None:
                p = min(p, p_min[info.name])
            p_min[info.name] = p
            figures[info.name] = (c.control, c.treatment, est, *sequential.interval(est, var, tau, CFG.alpha), p)
        users = {a: all_units.filter(pl.col("arm") == a)["user_id"].n_unique() for a in ("control", "treatment")}
        out.append({"metrics": figures, "srm": srm_check(users, {"control": 1 - CFG.treatment_share,
                                                                "treatment": CFG.treatment_share},
                                                         CFG.srm_p_threshold).to_dict()})
    return out


def _figures(res) -> dict:
    return {m.metric: (m.cum_control, m.cum_treatment, m.cum_change, m.seq_low, m.seq_high, m.seq_p_value)
            for m in res.metrics}


def _assert_same(res, expected: dict, p_values: bool = True) -> None:
    got = _figures(res)
    assert got.keys() == expected["metrics"].keys()
    for name, want in expected["metrics"].items():
        n = len(want) if p_values else len(want) - 1
        assert got[name][:n] == pytest.approx(want[:n], rel=1e-9, abs=1e-12), name
    assert res.srm_cumulative == expected["srm"]                      # integer user counts: exact


def _measure(store: MetricsStore, rows: pl.DataFrame, cycle_id: str):
    res = compute_cycle_metrics(rows, cycle_id, config=CFG, store=store)
    store.write(cycle_id, res)
    return res


def test_incremental_totals_equal_the_full_recomputation_every_cycle(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    results = [_measure(store, rows, f"c{k}") for k, rows in enumerate(cycles)]
    expected = _full_recomputation([r.units for r in results], [r.latency for r in results])
    for res, want in zip(results, expected):
        _assert_same(res, want)
        assert store.read(res.cycle_id).to_dict() == res.to_dict()
    assert results[-1].cumulative_cycles == [f"c{k}" for k in range(CYCLES)]
    # the totals stay one row per (arm, user) and per (arm, bucket, bin), however many cycles they cover
    assert [k for k in range(CYCLES) if store.totals(f"c{k}") is not None] == [CYCLES - 2, CYCLES - 1]
    totals = store.totals(f"c{CYCLES - 1}")
    assert totals.units.height == pl.concat([r.units for r in results]).select("arm", "user_id").n_unique()
    assert totals.latency.height == pl.concat([r.latency for r in results]).select("arm", "bucket", "bin").n_unique()


def test_a_cycle_reads_only_its_rows_and_the_previous_cycle(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    results = [_measure(store, rows, f"c{k}") for k, rows in enumerate(cycles[:-1])]
    for k in range(CYCLES - 2):     # every cycle before the previous one: frames gone, result unreadable
        d = tmp_path / "ab" / "cycles" / f"c{k}"
        for f in d.glob("*.parquet"):
            f.unlink()
        (d / "result.json").write_text("{damaged")
    last = compute_cycle_metrics(cycles[-1], f"c{CYCLES - 1}", config=CFG, store=store)
    units = [r.units for r in results] + [last.units]
    _assert_same(last, _full_recomputation(units, [r.latency for r in results] + [last.latency])[-1])


def test_a_store_without_totals_rebuilds_them_once(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    results = [_measure(store, rows, f"c{k}") for k, rows in enumerate(cycles[:3])]
    for f in (tmp_path / "ab").glob("cycles/*/cumulative_*.parquet"):   # as a store written before totals
        f.unlink()
    (tmp_path / "ab" / "index.json").unlink()
    assert store.cycles() == ["c0", "c1", "c2"]                          # the order read from the results
    res = _measure(store, cycles[3], "c3")
    expected = _full_recomputation([r.units for r in results] + [res.units],
                                   [r.latency for r in results] + [res.latency])
    _assert_same(res, expected[-1])
    assert store.totals("c3") is not None and store.totals("c2") is None


def test_measuring_an_earlier_cycle_again_drops_the_later_totals(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    results = [_measure(store, rows, f"c{k}") for k, rows in enumerate(cycles[:3])]
    again = _measure(store, cycles[3], "c1")              # c1's rows replaced: c2's totals summed the old ones
    assert again.seq == 2 and store.cycles() == ["c0", "c1", "c2"]
    assert store.totals("c2") is None and store.totals("c1") is not None
    res = _measure(store, cycles[4], "c3")
    units = [results[0].units, again.units, results[2].units, res.units]
    hists = [results[0].latency, again.latency, results[2].latency, res.latency]
    # c2's running-minimum p-value was taken over the old c1, so the p-values are not compared
    _assert_same(res, _full_recomputation(units, hists)[-1], p_values=False)


def test_retention_folds_old_frames_and_any_cycle_that_keeps_its_frames_is_measured_again_exactly(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    results = [_measure(store, rows, f"c{k}") for k, rows in enumerate(cycles[:4])]
    assert frames_to_fold([(1, "c0"), (2, "c1"), (3, "c2")], 2) == [(1, "c0")]
    assert frames_to_fold([(1, "c0"), (2, "c1")], 2) == [] and frames_to_fold([(1, "c0"), (2, "c1")], 0) == []
    assert store.prune_frames(2) == ["c0", "c1"]
    assert store.prune_frames(2) == []                                   # nothing more to fold
    ab = tmp_path / "ab" / "cycles"
    assert sorted(p.name for p in (ab / "c0").iterdir()) == ["result.json"]   # the summary stays, for audit
    assert (ab / "c2" / "units.parquet").is_file() and (ab / "c3" / "units.parquet").is_file()
    assert store.folded().through == 2 and store.folded().count == 2
    assert store.history()["cycle_id"].unique(maintain_order=True).to_list() == ["c0", "c1", "c2", "c3"]
    # c2 keeps its frames: measured again, with c1's totals gone, the rebuild starts from the folded totals
    again = _measure(store, cycles[4], "c2")
    units = [results[0].units, results[1].units, again.units]
    hists = [results[0].latency, results[1].latency, again.latency]
    _assert_same(again, _full_recomputation(units, hists)[-1], p_values=False)
    res = _measure(store, cycles[0], "c4")                                # c3's totals are stale: a rebuild too
    units += [results[3].units, res.units]
    hists += [results[3].latency, res.latency]
    _assert_same(res, _full_recomputation(units, hists)[-1], p_values=False)
    # a folded cycle cannot be measured again: its old sums are inside the folded totals
    with pytest.raises(ValueError, match="folded into the running totals by retention"):
        compute_cycle_metrics(cycles[1], "c1", config=CFG, store=store)


def test_a_fold_interrupted_before_its_files_went_is_finished_without_counting_a_cycle_twice(cycles, tmp_path):
    store = MetricsStore(tmp_path / "ab")
    results = [_measure(store, rows, f"c{k}") for k, rows in enumerate(cycles[:3])]
    kept = {c: [(tmp_path / "ab" / "cycles" / c / n).read_bytes() for n in ("units.parquet", "latency.parquet")]
            for c in ("c0",)}
    store.prune_frames(2)
    for c, (u, h) in kept.items():                    # as if the process died after folded.json, before the unlink
        (tmp_path / "ab" / "cycles" / c / "units.parquet").write_bytes(u)
        (tmp_path / "ab" / "cycles" / c / "latency.parquet").write_bytes(h)
    assert store.prune_frames(2) == ["c0"] and store.folded().count == 1
    again = _measure(store, cycles[3], "c1")
    _assert_same(again, _full_recomputation([results[0].units, again.units],
                                            [results[0].latency, again.latency])[-1], p_values=False)
