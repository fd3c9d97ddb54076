"""Paired significance tests over seeds and dev examples (protocol.md §5-6).

Every comparison in the benchmark is *paired*: two methods prune copies of the same base model of a (task, seed),
so the unit of replication is the seed and the statistic is the per-seed difference ``d_s = a_s - b_s`` of a
task's primary metric. All functions here are pure (no I/O, no global RNG): randomness comes from a seeded
:class:`numpy.random.Generator`, so every number in a report is reproducible.

Units: the functions do not care; the report passes scores in percent points (``100 *`` the fraction that
``benchmark.tasks.compute_metrics`` returns, MCC x 100).

Rounding: scores are computed in float64 (e.g. ``count / n * 100``), so two differences that are equal in exact
arithmetic (the same number of examples lost on two seeds) may differ in their last bits. Every statistic that
ranks, compares or divides by the spread of the differences first passes them through :func:`snap_differences`,
which makes differences equal up to rounding (:func:`rounding_tolerance`) exactly equal, and those within it of
0 exactly 0: constant-up-to-rounding differences are constant (t-test undefined, SD 0), not a t of 1e15.

What is here, and the source of each method:

* :func:`paired_differences`, :func:`describe` - per-seed differences, mean and sample SD (ddof=1).
* :func:`rounding_tolerance`, :func:`snap_differences` - the one rule for "equal up to float64 rounding".
* :func:`bootstrap_ci` - 95% percentile bootstrap CI of the mean paired difference, seeds resampled with
  replacement (Efron & Tibshirani 1993, ch. 13).
* :func:`sign_flip_test` - exact two-sided sign-flip (paired permutation) test of the mean difference, all
  ``2**n`` sign patterns for ``n <= 16``, Monte Carlo above (Good 2005, *Permutation, Parametric and Bootstrap
  Tests of Hypotheses*, §3.3; Dror et al. 2018, *The Hitchhiker's Guide to Testing Statistical Significance in
  NLP*). :func:`min_exact_p` is the smallest p-value it can give with ``n`` seeds, ``2 / 2**n``.
* :func:`wilcoxon_test`, :func:`paired_t_test` - secondary columns, ``scipy.stats.wilcoxon`` and
  ``scipy.stats.ttest_rel``; NaN with a note instead of an exception when the test is undefined.
* :func:`two_level_bootstrap` - paired two-level bootstrap (resample seeds, then dev examples within each
  seed, the same example indices for both methods) of the mean metric difference, for test-set noise
  (Davison & Hinkley 1997, §3.8 "hierarchical data"; Bouthillier et al. 2021, *Accounting for Variance in
  Machine Learning Benchmarks*). :func:`resampled_metric` computes accuracy / MCC for many resamples at once.
* :func:`holm` - Holm-Bonferroni step-down adjustment (Holm 1979) via
  ``statsmodels.stats.multitest.multipletests(method="holm")``.
* :func:`compare`, :func:`compare_with_without` - all of the above for one pair of methods, with and without
  the seeds flagged degenerate or base-failed (protocol.md §6).
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np

__all__ = [
    "EXACT_MAX_N",
    "ROUNDING_ULPS",
    "paired_differences",
    "rounding_tolerance",
    "snap_differences",
    "describe",
    "bootstrap_ci",
    "mean_ci_t",
    "sign_flip_test",
    "min_exact_p",
    "min_holm_p",
    "wilcoxon_test",
    "paired_t_test",
    "resampled_metric",
    "two_level_bootstrap",
    "holm",
    "compare",
    "compare_with_without",
]

#: Largest number of seeds for which :func:`sign_flip_test` enumerates every sign pattern (2**16 = 65536).
EXACT_MAX_N = 16
#: Metrics :func:`resampled_metric` knows (the primary metrics of the GLUE tasks).
METRICS = ("accuracy", "matthews_correlation")
#: :func:`rounding_tolerance` in units of float64 machine epsilon times the scores' magnitude (2**10).
ROUNDING_ULPS = 1024


def _vector(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return arr


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


# --------------------------------------------------------------------------- descriptive


def paired_differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """Per-seed differences ``a - b``.

    Args:
        a, b: 1-D sequences of the same length n, element s being seed s's score of each method
            (any unit; the result has the same unit).

    Returns:
        float array of shape (n,).

    Raises:
        ValueError: not 1-D, different lengths, or non-finite values.
    """
    a, b = _vector(a, "a"), _vector(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}")
    return a - b


def _scale(*samples: Any) -> float:
    """Largest |value| over the given arrays (0.0 when all are empty): the magnitude rounding errors scale with."""
    return max((float(np.max(np.abs(x))) for x in samples if np.size(x)), default=0.0)


def rounding_tolerance(scale: float) -> float:
    """Absolute tolerance below which two paired differences count as equal (up to float64 rounding).

    ``ROUNDING_ULPS * eps64 * |scale|`` = 1024 * 2.22e-16 * scale ~ 2.3e-13 * scale, where ``scale`` is the
    magnitude of the *scores* the differences came from (``max |a|, |b|``), not of the differences: a difference
    ``a - b`` carries the absolute rounding error of ``a`` and ``b``, however small it is itself.

    Why this size:

    * rounding: a score is ``count / n`` (one rounding, accuracy) or a short formula of the confusion counts
      (MCC: products, a square root, a division - some 10 roundings), times 100 for percent (one more), so its
      relative error is at most ~10 eps; a difference of two scores is off by at most ~20 eps * scale, and two
      differences equal in exact arithmetic (e.g. ``282/408*100 - 307/408*100`` on two seeds) by ~40 eps *
      scale (measured: at most 1.3 eps * scale for accuracies computed along four float paths on the GLUE
      dev sizes). The bound is 25x the estimate.
    * real variation: two different accuracies on a dev set of N examples differ by at least 1/N of the
      maximum score (0.245 points on MRPC's 408, 0.01 points on a 10 000-example set: 1e-4 * scale); MCC
      values of different confusion matrices on GLUE-sized dev sets differ by orders of magnitude more than
      the tolerance too. It stays ~8 orders of magnitude below the accuracy step, so it does not merge real
      differences.
    """
    return ROUNDING_ULPS * float(np.finfo(np.float64).eps) * abs(float(scale))


def snap_differences(diffs: Sequence[float], scale: float | None = None) -> np.ndarray:
    """``diffs`` with float64 rounding noise removed: the shared rule of every test statistic here.

    With ``tol = rounding_tolerance(max(scale, max|diffs|))``: a difference with ``|d| <= tol`` becomes exactly
    0, and magnitudes ``|d|`` within ``tol`` of each other (sorted, consecutive gaps ``<= tol``) become exactly
    equal (the smallest of the group; the sign is kept). So differences equal up to rounding are *constant*
    (ptp 0, SD 0, the t-test undefined), all-zero-up-to-rounding differences are all zero (Wilcoxon undefined,
    sign-flip p = 1), and ``+x`` and ``-x`` computed along two float paths are tied in Wilcoxon's ranks.

    Args:
        diffs: 1-D per-seed differences ``a - b``.
        scale: magnitude of the scores ``a``, ``b`` the differences came from (``max |a|, |b|``); None: the
            differences' own largest magnitude (enough unless every difference is tiny next to the scores -
            pass the scale when the scores are known, as :func:`compare` does).

    Returns:
        float array of the same shape; each element moved by at most ``tol`` times the group size.
    """
    d = _vector(diffs, "diffs")
    if d.size == 0:
        return d.copy()
    tol = rounding_tolerance(max(_scale(d), 0.0 if scale is None else abs(float(scale))))
    mag = np.abs(d)
    mag[mag <= tol] = 0.0
    order = np.argsort(mag, kind="stable")
    sorted_mag = mag[order]
    snapped = sorted_mag.copy()
    for i in range(1, sorted_mag.size):
        if sorted_mag[i] - sorted_mag[i - 1] <= tol:
            snapped[i] = snapped[i - 1]  # same group: the group's smallest magnitude
    out = np.empty_like(d)
    out[order] = snapped
    return np.where(out == 0.0, 0.0, np.sign(d) * out)


def _constant(snapped: np.ndarray) -> bool:
    return snapped.size > 0 and bool(np.all(snapped == snapped[0]))


def describe(x: Sequence[float]) -> dict[str, float]:
    """``{"n", "mean", "sd"}`` of a sample; ``sd`` is the sample SD (ddof=1), NaN when n < 2; mean NaN when n = 0."""
    x = _vector(x, "x")
    n = x.size
    return {"n": int(n), "mean": float(x.mean()) if n else math.nan,
            "sd": float(x.std(ddof=1)) if n > 1 else math.nan}


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
    d = _vector(diffs, "diffs")
    if n_boot < 1:
        raise ValueError(f"n_boot must be positive, got {n_boot}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if d.size < 2:
        return math.nan, math.nan
    rng = _rng(seed)
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

    x = _vector(x, "x")
    if x.size < 2:
        return math.nan, math.nan
    half = stats.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


# --------------------------------------------------------------------------- exact sign-flip test


def min_exact_p(n: int) -> float:
    """Smallest two-sided p-value the exact sign-flip test can give with ``n`` seeds: ``2 / 2**n`` (1.0 for n <= 1).

    Only the observed sign pattern and its mirror image reach the observed |mean|, so p >= 2/2**n:
    5 seeds -> 0.0625 (never below .05), 6 -> 0.03125, 10 -> 0.00195. NaN for n = 0.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n == 0:
        return math.nan
    return min(1.0, 2.0 / 2.0**n)


def min_holm_p(n: int, m: int) -> float:
    """Smallest Holm-adjusted p one of ``m`` exact tests over ``n`` seeds can give: ``min(1, m * 2/2**n)``."""
    if m < 1:
        return math.nan
    return min(1.0, m * min_exact_p(n))


def sign_flip_test(diffs: Sequence[float], n_mc: int = 100_000, seed: int | np.random.Generator | None = 0,
                   rtol: float = 1e-9, atol: float = 1e-12, scale: float | None = None) -> dict[str, Any]:
    """Two-sided sign-flip permutation test of "mean paired difference = 0".

    Under H0 (the two methods are exchangeable within each seed) every difference is equally likely to have
    either sign. The statistic is the mean difference; the p-value is the fraction of sign patterns whose
    |mean| is at least the observed |mean|. Rounding noise must not decide which patterns are "as extreme":
    the patterns are applied to :func:`snap_differences` (``diffs``, ``scale``) (differences equal up to
    float64 rounding made equal, those within rounding of 0 made 0) and a pattern counts when its |mean| is
    ``>= |obs| - (atol + rtol*|obs| + tol)``, ``tol`` = :func:`rounding_tolerance` of the scores' magnitude, so
    float ties count. Constant nonzero differences keep their exact p (``2/2**n``: only the observed pattern
    and its mirror reach |obs|); differences that are all zero up to rounding give p = 1.

    * n <= :data:`EXACT_MAX_N`: all ``2**n`` patterns are enumerated (the identity included), the p-value is
      exact and at least :func:`min_exact_p` (n).
    * n > :data:`EXACT_MAX_N`: ``n_mc`` random patterns from a seeded Generator; ``p = (1 + hits) / (1 + n_mc)``
      (the observed pattern counted once, Phipson & Smyth 2010), never 0.

    Args:
        diffs: 1-D per-seed differences.
        n_mc: Monte Carlo patterns when n > 16.
        seed: seed or Generator for the Monte Carlo branch.
        rtol, atol: extra tie tolerance, relative to |obs| and absolute.
        scale: magnitude of the scores the differences came from (see :func:`snap_differences`).

    Returns:
        ``{"p": float, "n": int, "statistic": mean difference, "exact": bool, "note": str}``. With n = 0,
        p is NaN; with all differences 0 (up to rounding), p = 1.

    Raises:
        ValueError: bad ``diffs``.
    """
    d = _vector(diffs, "diffs")
    n = d.size
    if n == 0:
        return {"p": math.nan, "n": 0, "statistic": math.nan, "exact": True, "note": "no paired seeds"}
    statistic = float(d.mean())
    scale = max(_scale(d), 0.0 if scale is None else abs(float(scale)))
    d = snap_differences(d, scale)
    observed = abs(d.mean())
    threshold = observed - (atol + rtol * observed + rounding_tolerance(scale))
    if n <= EXACT_MAX_N:
        patterns = np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)
        signs = 1.0 - 2.0 * (patterns & 1)  # (2**n, n) of +-1
        means = np.abs(signs @ d) / n
        p = float(np.mean(means >= threshold))
        exact, note = True, f"exact over {2**n} sign patterns"
    else:
        rng = _rng(seed)
        hits = 0
        done = 0
        chunk = 20_000
        while done < n_mc:
            k = min(chunk, n_mc - done)
            signs = rng.choice(np.array([-1.0, 1.0]), size=(k, n))
            hits += int(np.sum(np.abs(signs @ d) / n >= threshold))
            done += k
        p = (1 + hits) / (1 + n_mc)
        exact, note = False, f"Monte Carlo over {n_mc} sign patterns"
    return {"p": min(1.0, p), "n": int(n), "statistic": statistic, "exact": exact, "note": note}


# --------------------------------------------------------------------------- secondary tests


def wilcoxon_test(diffs: Sequence[float], scale: float | None = None) -> dict[str, Any]:
    """Wilcoxon signed-rank test of the paired differences (``scipy.stats.wilcoxon``, two-sided, defaults:
    zero differences dropped, exact null distribution for small samples without ties).

    The differences first go through :func:`snap_differences` (``diffs``, ``scale``): a difference that is 0 up
    to float64 rounding is a zero (dropped), and |differences| equal up to rounding are tied in the ranks
    (e.g. ``25/408*100`` and ``307/408*100 - 282/408*100``), as they would be in exact arithmetic.

    Args:
        diffs: 1-D per-seed differences.
        scale: magnitude of the scores the differences came from (``max |a|, |b|``); None: ``max |diffs|``.

    Returns:
        ``{"statistic", "p", "note"}``; statistic and p are NaN (with a note) when fewer than 2 seeds, or when
        every difference is zero up to rounding (the test is undefined, scipy would warn and return p = 1).
    """
    from scipy import stats

    d = _vector(diffs, "diffs")
    d = snap_differences(d, scale)
    if d.size < 2:
        return {"statistic": math.nan, "p": math.nan, "note": f"n={d.size} < 2: Wilcoxon undefined"}
    if np.count_nonzero(d) == 0:
        return {"statistic": math.nan, "p": math.nan, "note": "all differences are zero: Wilcoxon undefined"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        res = stats.wilcoxon(d)
    note = "" if np.count_nonzero(d) == d.size else f"{d.size - np.count_nonzero(d)} zero difference(s) dropped"
    return {"statistic": float(res.statistic), "p": float(res.pvalue), "note": note}


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Paired t-test of ``a`` against ``b`` (``scipy.stats.ttest_rel``, two-sided).

    ``t = mean(d) / (sd(d) / sqrt(n))`` with ``d = a - b`` and ``n - 1`` degrees of freedom.

    Returns:
        ``{"statistic", "p", "df", "note"}``; NaN with a note when n < 2 or the differences are constant -
        bit-identical or equal up to float64 rounding (:func:`snap_differences` with the scale ``max |a|, |b|``):
        the SD is 0 and t undefined or infinite, not the ~1e15 that rounding noise in the SD would give.
    """
    from scipy import stats

    d = paired_differences(a, b)
    if d.size < 2:
        return {"statistic": math.nan, "p": math.nan, "df": math.nan, "note": f"n={d.size} < 2: t-test undefined"}
    if _constant(snap_differences(d, _scale(np.asarray(a, float), np.asarray(b, float)))):
        return {"statistic": math.nan, "p": math.nan, "df": d.size - 1,
                "note": "differences are constant (SD 0): t-test undefined"}
    res = stats.ttest_rel(np.asarray(a, float), np.asarray(b, float))
    return {"statistic": float(res.statistic), "p": float(res.pvalue), "df": int(d.size - 1), "note": ""}


# --------------------------------------------------------------------------- two-level bootstrap


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
    rng = _rng(seed)
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


# --------------------------------------------------------------------------- multiple comparisons


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm-Bonferroni step-down adjustment of a family of p-values.

    Calls ``statsmodels.stats.multitest.multipletests(p, alpha, method="holm")`` on the finite p-values; NaN
    entries (tests that could not be run) stay NaN, are not rejected, and do not count in the family size.

    Returns:
        ``(adjusted, reject)``: float array of adjusted p-values (same order, capped at 1) and bool array of
        the hypotheses statsmodels rejects at family-wise level ``alpha`` (equivalently ``adjusted <= alpha``).
    """
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, math.nan)
    reject = np.zeros(p.shape, dtype=bool)
    ok = np.isfinite(p)
    if ok.any():
        rej, adj, _, _ = multipletests(p[ok], alpha=alpha, method="holm")
        adjusted[ok] = adj
        reject[ok] = rej
    return adjusted, reject


# --------------------------------------------------------------------------- one comparison


def compare(a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000, n_mc: int = 100_000,
            seed: int = 0) -> dict[str, Any]:
    """Every seed-level statistic of one paired comparison ``a - b`` (same unit as the inputs).

    Returns a flat dict: ``n``, ``mean_a``, ``sd_a``, ``mean_b``, ``sd_b``, ``mean_diff``, ``sd_diff``,
    ``ci_low``, ``ci_high`` (:func:`bootstrap_ci`), ``p_exact``, ``exact`` (:func:`sign_flip_test`),
    ``p_min`` (:func:`min_exact_p`), ``wilcoxon_stat``, ``p_wilcoxon``, ``t_stat``, ``p_t`` and ``notes``
    (a "; "-joined string of everything that was undefined). Differences equal up to float64 rounding
    (:func:`snap_differences`, scale ``max |a|, |b|``) are equal: ``sd_diff`` is 0.0 when they are constant.
    """
    d = paired_differences(a, b)
    scale = _scale(np.asarray(a, float), np.asarray(b, float))
    da, db, dd = describe(a), describe(b), describe(d)
    if d.size > 1 and _constant(snap_differences(d, scale)):
        dd["sd"] = 0.0
    low, high = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    perm = sign_flip_test(d, n_mc=n_mc, seed=seed, scale=scale)
    wil = wilcoxon_test(d, scale=scale)
    tt = paired_t_test(a, b)
    if d.size < 2:
        notes = [f"n={d.size}: no SD, CI, Wilcoxon or t-test"]
    else:
        notes = [x for x in (wil["note"], tt["note"]) if x]
    return {"n": dd["n"], "mean_a": da["mean"], "sd_a": da["sd"], "mean_b": db["mean"], "sd_b": db["sd"],
            "mean_diff": dd["mean"], "sd_diff": dd["sd"], "ci_low": low, "ci_high": high,
            "p_exact": perm["p"], "exact": perm["exact"], "p_min": min_exact_p(d.size),
            "wilcoxon_stat": wil["statistic"], "p_wilcoxon": wil["p"], "t_stat": tt["statistic"], "p_t": tt["p"],
            "notes": "; ".join(dict.fromkeys(notes))}


def compare_with_without(a: Sequence[float], b: Sequence[float], bad: Sequence[bool], **kwargs: Any) -> dict[str, Any]:
    """:func:`compare` on all seeds and on the seeds not flagged ``bad`` (protocol.md §6).

    Args:
        a, b: per-seed scores of the two methods (paired, same length).
        bad: per seed, True when either side of the pair is degenerate or its base model failed;
            such seeds are kept in ``"all"`` and dropped from ``"clean"``.
        **kwargs: passed to :func:`compare`.

    Returns:
        ``{"all": compare(a, b), "clean": compare(a[~bad], b[~bad]), "n_all": n, "n_excluded": count}``.
    """
    a, b = _vector(a, "a"), _vector(b, "b")
    bad = np.asarray(bad, dtype=bool)
    if not (a.shape == b.shape == bad.shape):
        raise ValueError(f"a {a.shape}, b {b.shape} and bad {bad.shape} must have the same length")
    return {"all": compare(a, b, **kwargs), "clean": compare(a[~bad], b[~bad], **kwargs),
            "n_all": int(a.size), "n_excluded": int(bad.sum())}
