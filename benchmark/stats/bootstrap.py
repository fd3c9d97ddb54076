"""Confidence intervals: the percentile bootstrap over seeds, the t interval of a mean, and the paired two-level
bootstrap (seeds, then dev examples) with its vectorised metric."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from headprune_bench.benchmark.stats.paired import as_vector, make_rng

#: Metrics :func:`resampled_metric` knows (the primary metrics of the GLUE tasks).
METRICS = ("accuracy", "matthews_correlation")


def bootstrap_ci(diffs: Sequence[float], n_boot: int = 10_000, confidence: float = 0.95,
                 seed: int | np.random.Generator | None = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``diffs`` (the mean paired difference over seeds).

    Draws ``n_boot`` resamples of the n seeds with replacement, takes each resample's mean, and returns the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of those means. With few seeds (n < ~10)
    a percentile interval under-covers; the report prints n beside every interval.

    Args:
        diffs: 1-D per-seed differences (unit kept).
        n_boot: number of bootstrap resamples (> 0).
        confidence: coverage in (0, 1).
        seed: seed or Generator for the resampling.

    Returns:
        ``(low, high)``; ``(nan, nan)`` when n < 2 (one seed says nothing about seed-to-seed variation).

    Raises:
        ValueError: bad ``diffs``, ``n_boot`` < 1 or ``confidence`` outside (0, 1).
    """
    d = as_vector(diffs, "diffs")
    if n_boot < 1:
        raise ValueError(f"n_boot must be positive, got {n_boot}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if d.size < 2:
        return math.nan, math.nan
    rng = make_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


def mean_ci_t(x: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Student-t CI of a mean, ``mean +- t_{(1+c)/2, n-1} * SD / sqrt(n)``; ``(nan, nan)`` when n < 2.

    Used for the error bars of single-method scores in plots (with 3-5 seeds a percentile bootstrap of a
    marginal mean is far too narrow; the t interval is the honest one).
    """
    from scipy import stats

    x = as_vector(x, "x")
    if x.size < 2:
        return math.nan, math.nan
    half = stats.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


def resampled_metric(predictions: Sequence[int], labels: Sequence[int], idx: np.ndarray, metric: str) -> np.ndarray:
    """A metric on many resamples of one dev set at once.

    Args:
        predictions, labels: 1-D int class ids of length N (the dev set of one seed).
        idx: int array (B, N') of example indices, one resample per row.
        metric: ``"accuracy"`` (fraction correct) or ``"matthews_correlation"`` (multi-class MCC, as
            ``sklearn.metrics.matthews_corrcoef``: ``(c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t))`` from the
            confusion matrix, 0 when the denominator is 0).

    Returns:
        float array (B,), fractions (accuracy) or in [-1, 1] (MCC).

    Raises:
        ValueError: unknown metric, mismatched lengths or negative class ids.
    """
    pred = np.asarray(predictions, dtype=np.int64)
    lab = np.asarray(labels, dtype=np.int64)
    if pred.shape != lab.shape or pred.ndim != 1:
        raise ValueError(f"predictions {pred.shape} and labels {lab.shape} must be 1-D of the same length")
    idx = np.asarray(idx)
    if idx.ndim != 2:
        raise ValueError(f"idx: expected a (B, N) array, got shape {idx.shape}")
    if metric == "accuracy":
        return (pred == lab)[idx].mean(axis=1)
    if metric != "matthews_correlation":
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    if pred.size and min(pred.min(), lab.min()) < 0:
        raise ValueError("class ids must be non-negative")
    k = int(max(pred.max(), lab.max())) + 1 if pred.size else 1
    codes = lab * k + pred  # confusion-matrix cell of each example
    b = idx.shape[0]
    flat = codes[idx] + (np.arange(b, dtype=np.int64) * k * k)[:, None]
    conf = np.bincount(flat.ravel(), minlength=b * k * k).reshape(b, k, k).astype(float)
    t = conf.sum(axis=2)  # true-class counts
    p = conf.sum(axis=1)  # predicted-class counts
    c = np.trace(conf, axis1=1, axis2=2)
    s = conf.sum(axis=(1, 2))
    num = c * s - np.sum(t * p, axis=1)
    den = np.sqrt((s**2 - np.sum(p * p, axis=1)) * (s**2 - np.sum(t * t, axis=1)))
    out = np.zeros(b)
    ok = den > 0
    out[ok] = num[ok] / den[ok]
    return out


def two_level_bootstrap(preds_a: Sequence[Sequence[int]], preds_b: Sequence[Sequence[int]],
                        labels: Sequence[Sequence[int]], metric: str, n_boot: int = 1000, confidence: float = 0.95,
                        seed: int | np.random.Generator | None = 0) -> dict[str, Any]:
    """Paired two-level bootstrap CI of the mean (over seeds) metric difference ``a - b``.

    Level 1 resamples the S seeds with replacement; level 2 resamples each drawn seed's dev examples with
    replacement, with the *same* example indices for both methods (the pairing within a seed). For speed the
    level-2 resamples are drawn once per seed (``n_boot`` of them, metric computed vectorised by
    :func:`resampled_metric`) and each level-1 draw of a seed picks one of them at random, so a seed drawn
    twice in one replicate almost surely gets two different example resamples.

    Args:
        preds_a, preds_b: per seed, the 1-D predicted class ids of each method on that seed's dev set.
        labels: per seed, the gold class ids (the seeds' dev sets may differ in size).
        metric: ``"accuracy"`` or ``"matthews_correlation"``.
        n_boot: replicates (> 0).
        confidence: coverage in (0, 1).
        seed: seed or Generator.

    Returns:
        ``{"estimate", "low", "high", "n", "n_boot", "note"}``: estimate = mean over seeds of
        ``metric(a) - metric(b)`` on the full dev sets (fraction units); low/high the percentile interval.
        With no seeds, all NaN.

    Raises:
        ValueError: different numbers of seeds or of examples within a seed, unknown metric, bad n_boot.
    """
    s = len(labels)
    if not (len(preds_a) == len(preds_b) == s):
        raise ValueError(f"seeds differ: {len(preds_a)} / {len(preds_b)} predictions, {s} labels")
    if n_boot < 1:
        raise ValueError(f"n_boot must be positive, got {n_boot}")
    if s == 0:
        return {"estimate": math.nan, "low": math.nan, "high": math.nan, "n": 0, "n_boot": n_boot,
                "note": "no paired seeds"}
    rng = make_rng(seed)
    point = np.empty(s)
    inner = np.empty((s, n_boot))
    for i in range(s):
        pa, pb, lab = (np.asarray(x, dtype=np.int64) for x in (preds_a[i], preds_b[i], labels[i]))
        if not (pa.shape == pb.shape == lab.shape) or lab.ndim != 1 or lab.size == 0:
            raise ValueError(f"seed {i}: predictions {pa.shape}, {pb.shape} and labels {lab.shape} must be "
                             "non-empty 1-D of the same length")
        full = np.arange(lab.size)[None, :]
        point[i] = (resampled_metric(pa, lab, full, metric) - resampled_metric(pb, lab, full, metric))[0]
        idx = rng.integers(0, lab.size, size=(n_boot, lab.size))
        inner[i] = resampled_metric(pa, lab, idx, metric) - resampled_metric(pb, lab, idx, metric)
    seeds = rng.integers(0, s, size=(n_boot, s))
    cols = rng.integers(0, n_boot, size=(n_boot, s))
    reps = inner[seeds, cols].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(reps, [alpha, 1 - alpha])
    note = "" if s > 1 else "one seed: examples resampled only"
    return {"estimate": float(point.mean()), "low": float(low), "high": float(high), "n": s, "n_boot": n_boot,
            "note": note}
