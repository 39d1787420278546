"""Latency quantiles (p50, p95) from log-spaced histograms, with intervals from a bucket bootstrap over users.

Rows are reduced once to counts per (arm, policy_version, bucket, bin): `bin = floor(ln(latency_ms) /
ln(1 + resolution))`, so a bin spans a factor (1 + resolution) and its geometric centre, the value reported, is
within resolution/2 of every latency in it (0.25 % by default). The quantile is the inverted-CDF one (numpy's
`method="inverted_cdf"`): the smallest value whose cumulative share reaches q. Histograms add across cycles, so
the cumulative quantile needs no rows either.

Users are hashed (`bucket_expr`) into `buckets` buckets. The
interval of the relative change of a quantile resamples each arm's buckets with replacement (a cluster
bootstrap: a user's requests always move together, as the router randomizes users) and takes the bootstrap
standard error; the interval is the normal one on that error, as for the ratio metrics, so that the sequential
interval can use the same variance.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from pipelines.metrics.intervals import Change, normal_interval

MIN_MS = 0.01   # latencies at or below this share the lowest bin


def bucket_expr(buckets: int) -> pl.Expr:
    """user_id -> bucket: polars' string hash with fixed seeds, modulo `buckets` (deterministic for a polars
    version; pyproject pins the minor version, and the store records it in each result's settings)."""
    return (pl.col("user_id").hash(seed=0x5EED) % buckets).cast(pl.Int32).alias("bucket")


def bin_expr(resolution: float) -> pl.Expr:
    return (pl.col("latency_ms").cast(pl.Float64).clip(lower_bound=MIN_MS).log()
            / math.log1p(resolution)).floor().cast(pl.Int32).alias("bin")


def bin_value(bins: np.ndarray | int, resolution: float) -> np.ndarray | float:
    """The geometric centre of bin(s) `bins`."""
    return np.exp((np.asarray(bins, dtype=np.float64) + 0.5) * math.log1p(resolution))


def latency_histogram(rows: pl.LazyFrame, buckets: int, resolution: float) -> pl.LazyFrame:
    """Counts per (arm, policy_version, bucket, bin)."""
    return (rows.select("arm", "policy_version", bucket_expr(buckets), bin_expr(resolution))
            .group_by("arm", "policy_version", "bucket", "bin").agg(count=pl.len()))


def quantile_of_counts(bins: np.ndarray, counts: np.ndarray, q: float, resolution: float) -> float | None:
    """Inverted-CDF quantile of a histogram (bins ascending)."""
    total = counts.sum()
    if total <= 0:
        return None
    cum = np.cumsum(counts)
    idx = int(np.searchsorted(cum, q * total - 1e-9 * total, side="left"))
    return float(bin_value(bins[min(idx, len(bins) - 1)], resolution))


def quantile(hist: pl.DataFrame, q: float, resolution: float) -> float | None:
    """The q-quantile of every count in `hist` (columns bin, count)."""
    if hist.is_empty():
        return None
    h = hist.group_by("bin").agg(pl.col("count").sum()).sort("bin")
    return quantile_of_counts(h["bin"].to_numpy(), h["count"].to_numpy().astype(np.float64), q, resolution)


def _dense(hist: pl.DataFrame, bins: np.ndarray) -> np.ndarray:
    """Buckets x bins count matrix of one arm (only the buckets that have rows)."""
    h = hist.group_by("bucket", "bin").agg(pl.col("count").sum())
    bucket_ids, b_idx = np.unique(h["bucket"].to_numpy(), return_inverse=True)
    k_idx = np.searchsorted(bins, h["bin"].to_numpy())
    flat = np.bincount(b_idx * len(bins) + k_idx, weights=h["count"].to_numpy().astype(np.float64),
                       minlength=len(bucket_ids) * len(bins))
    return flat.reshape(len(bucket_ids), len(bins))


def _resampled_quantiles(m: np.ndarray, q: float, bins: np.ndarray, resolution: float, resamples: int,
                         rng: np.random.Generator) -> np.ndarray:
    g = m.shape[0]
    w = rng.multinomial(g, np.full(g, 1.0 / g), size=resamples).astype(np.float64)
    cum = np.cumsum(w @ m, axis=1)
    target = q * cum[:, -1:] - 1e-9 * cum[:, -1:]
    idx = np.minimum((cum < target).sum(axis=1), len(bins) - 1)
    return bin_value(bins[idx], resolution)


def quantile_change(hist_c: pl.DataFrame, hist_t: pl.DataFrame, q: float, resolution: float, alpha: float,
                    resamples: int, seed: int) -> Change:
    """Relative change of the q-quantile, treatment vs control, with the bucket-bootstrap interval."""
    qc, qt = quantile(hist_c, q, resolution), quantile(hist_t, q, resolution)
    if qc is None or qt is None:
        return Change(qc, qt, None, None, None, None, None, None, None, alpha)
    rel, absolute = qt / qc - 1, qt - qc
    bins = np.unique(np.concatenate([hist_c["bin"].to_numpy(), hist_t["bin"].to_numpy()]))
    mc, mt = _dense(hist_c, bins), _dense(hist_t, bins)
    if mc.shape[0] < 2 or mt.shape[0] < 2:
        return Change(qc, qt, absolute, rel, None, None, None, None, None, alpha)
    rng = np.random.default_rng(seed)
    bc = _resampled_quantiles(mc, q, bins, resolution, resamples, rng)
    bt = _resampled_quantiles(mt, q, bins, resolution, resamples, rng)
    var = float(np.var(bt / bc - 1, ddof=1))
    low, high, p = normal_interval(rel, var, alpha)
    return Change(qc, qt, absolute, rel, var, low, high, p, float(np.var(bt - bc, ddof=1)), alpha)
