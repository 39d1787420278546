"""One cycle's A/B metrics: reward rows in, `CycleMetrics` out (see the package docstring for the contract)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from pipelines.metrics import quantiles, sequential
from pipelines.metrics.catalog import BY_NAME, METRICS, RATIO_METRICS
from pipelines.metrics.config import AbConfig
from pipelines.metrics.cuped import cuped_arms
from pipelines.metrics.cumulative import Totals, advance, rebuild
from pipelines.metrics.intervals import Change, moments, moments_of, ratio_change, relative_change
from pipelines.metrics.monitors import evaluate
from pipelines.metrics.rates import DEFINITIONS, INPUT_COLUMNS, den_col, rates, unit_stats
from pipelines.metrics.result import CycleMetrics, MetricResult, verdict
from pipelines.metrics.srm import srm_check
from pipelines.metrics.store import MetricsStore, check_cycle_id
from schemas import storage


def cycle_files(table_root: str | Path, cycle_id: str) -> list[Path | str]:
    """The reward table's files of one cycle: `<root>/policy_version=*/window=<cycle_id>/*.parquet` (the layout
    `rtrl rewards --cycle ID` writes, pipelines/rewards/sink.py); the root is a path or an object-store URL."""
    pattern = f"policy_version=*/window={check_cycle_id(cycle_id)}/*.parquet"
    return [f.loc for f in storage.list_files(table_root, pattern) if not storage.is_temp(f.loc)]


def scan_cycle(table_root: str | Path, cycle_id: str) -> pl.LazyFrame:
    """The cycle's reward rows, lazily (locally only the columns the metrics read are loaded)."""
    files = cycle_files(table_root, cycle_id)
    if not files:
        raise FileNotFoundError(f"no reward rows for cycle {cycle_id!r} under {table_root} "
                                f"(expected policy_version=*/window={cycle_id}/*.parquet)")
    if all(isinstance(f, Path) for f in files):
        return pl.scan_parquet(files, hive_partitioning=False)
    return pl.concat([pl.from_arrow(storage.read_parquet(f)) for f in files]).lazy()


def _as_utc(as_of: datetime | str | None) -> datetime | None:
    if as_of is None:
        return None
    t = datetime.fromisoformat(as_of.replace("Z", "+00:00")) if isinstance(as_of, str) else as_of
    if t.tzinfo is None:
        raise ValueError("as_of needs a time zone")
    return t.astimezone(timezone.utc)


def _prepare(rewards: pl.LazyFrame | pl.DataFrame, arms: list[str], as_of: datetime | None):
    """(rows of the two arms mature at as_of, lazily; row counts per arm, lazily: all rows and immature ones)."""
    lf = rewards.lazy()
    names = lf.collect_schema().names()
    missing = [c for c in INPUT_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"reward rows lack columns {missing} (schemas/rewards.py RewardRow)")
    immature = (pl.col("mature_time") > pl.lit(as_of)) if as_of is not None else pl.lit(False)
    lf = lf.select([c for c in INPUT_COLUMNS if c != "mature_time" or as_of is not None])
    counts = lf.group_by("arm").agg(rows=pl.len(), immature=immature.sum())
    keep = lf.filter(pl.col("arm").is_in(arms) & ~immature)
    return keep, counts


def _metric_row(name: str, cyc: Change, den_c, den_t) -> MetricResult:
    info = BY_NAME[name]
    change, _, low, high, p = cyc.on(info.scale)
    _, _, abs_low, abs_high, _ = cyc.on("absolute")
    return MetricResult(metric=name, label=info.label, unit=info.unit, better=info.better, scale=info.scale,
                        control=cyc.control, treatment=cyc.treatment, absolute=cyc.absolute, relative=cyc.relative,
                        change=change, low=low, high=high, p_value=p, abs_low=abs_low, abs_high=abs_high,
                        denominator_control=den_c,
                        denominator_treatment=den_t, verdict=verdict(low, high, info.better))


def _tau(info, change: Change, cfg: AbConfig) -> float:
    """The mixing scale of the sequential test on the metric's scale: `sequential_tau` is relative, so an
    absolute change mixes over sequential_tau x |control|."""
    if info.scale == "relative":
        return cfg.sequential_tau
    return sequential.absolute_tau(cfg.sequential_tau, change.control)


def _changes(units: pl.DataFrame, hist: pl.DataFrame, control: str, treatment: str, cfg: AbConfig,
             seed_offset: int = 0) -> dict[str, Change]:
    out: dict[str, Change] = {}
    for m in RATIO_METRICS:
        mom = moments(units, m, ["arm"])
        out[m] = ratio_change(moments_of(mom, arm=control), moments_of(mom, arm=treatment), cfg.alpha)
    hc, ht = hist.filter(pl.col("arm") == control), hist.filter(pl.col("arm") == treatment)
    for info in METRICS:
        if info.kind == "quantile":
            out[info.name] = quantiles.quantile_change(hc, ht, info.quantile, cfg.latency_resolution, cfg.alpha,
                                                       cfg.bootstrap_resamples, cfg.seed + seed_offset)
    return out


def _denominators(units: pl.DataFrame, hist: pl.DataFrame, arm: str) -> dict[str, float]:
    u = units.filter(pl.col("arm") == arm)
    out = {m: float(u[den_col(m)].sum()) for m in RATIO_METRICS}
    n = float(hist.filter(pl.col("arm") == arm)["count"].sum())
    out.update({i.name: n for i in METRICS if i.kind == "quantile"})
    return out


def _by_version(units: pl.DataFrame, hist: pl.DataFrame, control: str, cfg: AbConfig) -> list[dict]:
    table = rates(units, ["arm", "policy_version"])
    rows = []
    for r in table.iter_rows(named=True):
        h = hist.filter((pl.col("arm") == r["arm"]) & (pl.col("policy_version") == r["policy_version"]))
        for info in METRICS:
            if info.kind == "quantile":
                r[info.name] = quantiles.quantile(h, info.quantile, cfg.latency_resolution)
        if r["arm"] != control:
            sub = units.filter(((pl.col("arm") == r["arm"]) & (pl.col("policy_version") == r["policy_version"]))
                               | (pl.col("arm") == control))
            for m in RATIO_METRICS:
                mom = moments(sub, m, ["arm"])
                ch = ratio_change(moments_of(mom, arm=control), moments_of(mom, arm=r["arm"]), cfg.alpha)
                r[f"{m}_change"], _, r[f"{m}_low"], r[f"{m}_high"], _ = ch.on(BY_NAME[m].scale)
        rows.append(r)
    return rows


def _by_org(units: pl.DataFrame, control: str, treatment: str, cfg: AbConfig) -> list[dict]:
    rows = []
    for m in RATIO_METRICS:
        mom = moments(units, m, ["org_id", "arm"])
        for org in sorted(mom["org_id"].unique().to_list()):
            c, t = moments_of(mom, org_id=org, arm=control), moments_of(mom, org_id=org, arm=treatment)
            ch = ratio_change(c, t, cfg.alpha)
            scale = BY_NAME[m].scale
            change, _, low, high, p = ch.on(scale)
            rows.append({"org_id": org, "metric": m, "control": ch.control, "treatment": ch.treatment,
                         "relative": ch.relative, "scale": scale, "change": change, "low": low, "high": high,
                         "p_value": p, "users_control": c.n if c else 0, "users_treatment": t.n if t else 0})
    return rows


def _users(units: pl.DataFrame, arm: str) -> int:
    return units.filter(pl.col("arm") == arm)["user_id"].n_unique()


def _check_definitions(earlier: CycleMetrics, cycle_id: str) -> None:
    """Refuse to accumulate this cycle with an earlier one whose per-user sums were made under other metric
    definitions (rates.DEFINITIONS): the same column names would mean other things."""
    found = earlier.settings.get("metric_definitions", 1)
    if found != DEFINITIONS:
        c = earlier.cycle_id
        raise ValueError(f"cycle {c!r} was measured with A/B metric definitions {found}, this code has "
                         f"{DEFINITIONS} (pipelines/metrics/rates.py): compute the stored cycles again, oldest "
                         f"first (`rtrl ab compute --cycle {c}` ...), before measuring {cycle_id!r}")


def _totals_before(store: MetricsStore, prior: list[str], prev: CycleMetrics | None, cycle_id: str) -> Totals | None:
    """The totals over the cycles before this one (cumulative.py): those the previous cycle keeps, or, when it keeps
    none for exactly these cycles, rebuilt once from the totals retention folded (`MetricsStore.folded`) and every
    later cycle's per-user sums. Each cycle checked the definitions of the one before it when it was measured, so
    only the previous one is read here."""
    if prev is None:
        return None
    _check_definitions(prev, cycle_id)
    kept = store.totals(prev.cycle_id) if prev.cumulative_cycles == prior else None
    if kept is not None:
        return kept
    for c in prior[:-1]:
        _check_definitions(store.read(c), cycle_id)
    base = store.folded()
    if base is not None and base.definitions != DEFINITIONS:
        raise ValueError(f"the A/B totals folded by retention were summed under metric definitions "
                         f"{base.definitions}, this code has {DEFINITIONS} (pipelines/metrics/rates.py): they cannot "
                         f"be rebuilt for {cycle_id!r}")
    through = base.through if base is not None else 0
    seqs = store.seqs()
    return rebuild([(store.units(c), store.latency(c)) for c in prior if seqs[c] > through],
                   base.totals if base is not None else None)


def compute_cycle_metrics(rewards: pl.LazyFrame | pl.DataFrame, cycle_id: str, control_arm: str | None = None,
                          treatment_arm: str | None = None, as_of: datetime | str | None = None, *,
                          config: AbConfig | None = None, store: MetricsStore | None = None,
                          pre_period: pl.LazyFrame | pl.DataFrame | None = None) -> CycleMetrics:
    """A/B metrics of one cycle's reward rows; see the `pipelines.metrics` docstring for every argument."""
    cfg = config or AbConfig()
    control, treatment = control_arm or cfg.control_arm, treatment_arm or cfg.treatment_arm
    check_cycle_id(cycle_id)
    t_as_of = _as_utc(as_of)
    rows, counts_lf = _prepare(rewards, [control, treatment], t_as_of)
    # the one pass over the rows: three aggregations of a single scan
    arm_counts, units, hist = pl.collect_all([counts_lf, unit_stats(rows),
                                              quantiles.latency_histogram(rows, cfg.buckets, cfg.latency_resolution)])

    if store is not None:
        store.check_measurable(cycle_id)
    prior = store.prior(cycle_id) if store is not None else []
    prev = store.read(prior[-1]) if prior else None
    totals = advance(_totals_before(store, prior, prev, cycle_id), units, hist)   # every cycle so far

    cyc = _changes(units, hist, control, treatment, cfg)
    cum = _changes(totals.units, totals.latency, control, treatment, cfg, seed_offset=1) if prior else cyc
    den_c, den_t = _denominators(units, hist, control), _denominators(units, hist, treatment)
    pre_units = (unit_stats(pre_period.lazy().select(INPUT_COLUMNS)).collect()
                 if pre_period is not None and cfg.cuped else None)

    metrics = []
    for info in METRICS:
        name = info.name
        mr = _metric_row(name, cyc[name], den_c[name], den_t[name])
        c = cum[name]
        est, var, _, _, _ = c.on(info.scale)
        tau = _tau(info, c, cfg)
        mr.cum_control, mr.cum_treatment, mr.cum_change = c.control, c.treatment, est
        mr.seq_low, mr.seq_high = sequential.interval(est, var, tau, cfg.alpha)
        p = sequential.p_value(est, var, tau)
        if prev is not None and p is not None:
            try:
                earlier = prev.metric(name).seq_p_value
            except KeyError:
                earlier = None
            p = min(p, earlier) if earlier is not None else p
        mr.seq_p_value = p
        mr.seq_verdict = verdict(mr.seq_low, mr.seq_high, info.better)
        if pre_units is not None and info.kind == "ratio":
            arms = cuped_arms(units, pre_units, name, (control, treatment))
            if arms:
                a_c, a_t = arms[control], arms[treatment]
                ch = relative_change(a_c.adjusted, a_c.variance, a_t.adjusted, a_t.variance, cfg.alpha)
                mr.cuped_change, _, mr.cuped_low, mr.cuped_high, _ = ch.on(info.scale)
                raw = sum(a.variance_unadjusted for a in arms.values())
                mr.cuped_variance_reduction = 1 - sum(a.variance for a in arms.values()) / raw if raw > 0 else None
        metrics.append(mr)

    shares = {control: 1 - cfg.treatment_share, treatment: cfg.treatment_share}
    srm = srm_check({control: _users(units, control), treatment: _users(units, treatment)}, shares,
                    cfg.srm_p_threshold)
    srm_cum = srm_check({control: _users(totals.units, control), treatment: _users(totals.units, treatment)},
                        shares, cfg.srm_p_threshold)

    by_arm = {r["arm"]: r for r in arm_counts.iter_rows(named=True)}
    unknown = {a: int(units.filter(pl.col("arm") == a)["unknown_labels"].sum()) for a in (control, treatment)}
    known = {a: int(units.filter(pl.col("arm") == a)["known_labels"].sum()) for a in (control, treatment)}
    counts = {
        "rows": int(sum(r["rows"] for r in by_arm.values())),
        "rows_used": int(units["n"].sum()),
        "rows_by_arm": {a: int(by_arm.get(a, {}).get("rows", 0)) for a in (control, treatment)},
        "rows_other_arms": {a: int(r["rows"]) for a, r in by_arm.items() if a not in (control, treatment)},
        "immature_rows_excluded": int(sum(r["immature"] for r in by_arm.values())),
        "users_by_arm": {a: _users(units, a) for a in (control, treatment)},
        "unknown_labels": unknown,
        "known_labels": known,
        "unknown_label_share": {a: (unknown[a] / (unknown[a] + known[a]) if unknown[a] + known[a] else None)
                                for a in (control, treatment)},
        "orgs": int(units["org_id"].n_unique()),
    }
    versions = {a: sorted(units.filter(pl.col("arm") == a)["policy_version"].unique().to_list())
                for a in (control, treatment)}
    monitors = [evaluate(m, cyc[m], th).to_dict() for m, th in cfg.monitors.items()]
    settings = {"sequential_tau": cfg.sequential_tau, "treatment_share": cfg.treatment_share,
                "srm_p_threshold": cfg.srm_p_threshold, "buckets": cfg.buckets,
                "bootstrap_resamples": cfg.bootstrap_resamples, "latency_resolution": cfg.latency_resolution,
                "seed": cfg.seed, "cuped": pre_units is not None, "polars": pl.__version__,
                "metric_definitions": DEFINITIONS}
    return CycleMetrics(
        cycle_id=cycle_id, control_arm=control, treatment_arm=treatment, alpha=cfg.alpha,
        as_of=t_as_of.isoformat() if t_as_of else None,
        seq=store.seq_of(cycle_id) if store is not None else None, versions=versions, counts=counts,
        metrics=metrics, srm=srm.to_dict(), srm_cumulative=srm_cum.to_dict(),
        by_version=_by_version(units, hist, control, cfg), by_org=_by_org(units, control, treatment, cfg),
        monitors=monitors, cumulative_cycles=[*prior, cycle_id], settings=settings, units=units, latency=hist,
        totals=totals)
