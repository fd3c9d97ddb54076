"""Significance tests of paired differences: the exact sign-flip test (and the smallest p it can give), the
Wilcoxon signed-rank and paired t-tests, and the Holm-Bonferroni adjustment of a family of p-values."""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from headprune_bench.benchmark.stats.paired import (
    all_equal,
    as_vector,
    magnitude,
    make_rng,
    paired_differences,
    rounding_tolerance,
    snap_differences,
)

#: Largest number of seeds for which :func:`sign_flip_test` enumerates every sign pattern (2**16 = 65536).
EXACT_MAX_N = 16


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
                   scale: float | None = None) -> dict[str, Any]:
    """Two-sided sign-flip permutation test of "mean paired difference = 0".

    Under H0 (the two methods are exchangeable within each seed) every difference is equally likely to have
    either sign. The statistic is the mean difference; the p-value is the fraction of sign patterns whose
    |mean| is at least the observed |mean|. Rounding noise must not decide which patterns are "as extreme":
    the patterns are applied to :func:`snap_differences` (``diffs``, ``scale``) (differences equal up to
    float64 rounding made equal, those within rounding of 0 made 0) and a pattern counts when its |mean| is
    ``>= |obs| - tol``, ``tol`` = :func:`rounding_tolerance` of the scores' magnitude (the one rule of every test
    here), so float ties count. Constant nonzero differences keep their exact p (``2/2**n``: only the observed pattern
    and its mirror reach |obs|); differences that are all zero up to rounding give p = 1.

    * n <= :data:`EXACT_MAX_N`: all ``2**n`` patterns are enumerated (the identity included), the p-value is
      exact and at least :func:`min_exact_p` (n).
    * n > :data:`EXACT_MAX_N`: ``n_mc`` random patterns from a seeded Generator; ``p = (1 + hits) / (1 + n_mc)``
      (the observed pattern counted once, Phipson & Smyth 2010), never 0.

    Args:
        diffs: 1-D per-seed differences.
        n_mc: Monte Carlo patterns when n > 16.
        seed: seed or Generator for the Monte Carlo branch.
        scale: magnitude of the scores the differences came from (see :func:`snap_differences`).

    Returns:
        ``{"p": float, "n": int, "statistic": mean difference, "exact": bool, "note": str}``. With n = 0,
        p is NaN; with all differences 0 (up to rounding), p = 1.

    Raises:
        ValueError: bad ``diffs``.
    """
    d = as_vector(diffs, "diffs")
    n = d.size
    if n == 0:
        return {"p": math.nan, "n": 0, "statistic": math.nan, "exact": True, "note": "no paired seeds"}
    statistic = float(d.mean())
    scale = max(magnitude(d), 0.0 if scale is None else abs(float(scale)))
    d = snap_differences(d, scale)
    observed = abs(d.mean())
    threshold = observed - rounding_tolerance(scale)
    if n <= EXACT_MAX_N:
        patterns = np.arange(2**n, dtype=np.int64)[:, None] >> np.arange(n, dtype=np.int64)
        signs = 1.0 - 2.0 * (patterns & 1)  # (2**n, n) of +-1
        means = np.abs(signs @ d) / n
        p = float(np.mean(means >= threshold))
        exact, note = True, f"exact over {2**n} sign patterns"
    else:
        rng = make_rng(seed)
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

    d = as_vector(diffs, "diffs")
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
    if all_equal(snap_differences(d, magnitude(np.asarray(a, float), np.asarray(b, float)))):
        return {"statistic": math.nan, "p": math.nan, "df": d.size - 1,
                "note": "differences are constant (SD 0): t-test undefined"}
    res = stats.ttest_rel(np.asarray(a, float), np.asarray(b, float))
    return {"statistic": float(res.statistic), "p": float(res.pvalue), "df": int(d.size - 1), "note": ""}


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm-Bonferroni step-down adjustment of a family of p-values (Holm 1979).

    Sorted ascending, the i-th of m finite p-values (i from 0) is adjusted to max over j <= i of min(1, (m - j) p_j);
    the hypotheses are rejected in that order while p_i <= alpha / (m - i). NaN entries (tests that could not be
    run) stay NaN, are not rejected, and do not count in the family size. Equal to
    ``statsmodels.stats.multitest.multipletests(p, alpha, method="holm")`` (tested), without the full garbage
    collection statsmodels runs on every call (see docs/reports.md#statistics).

    Returns:
        ``(adjusted, reject)``: float array of adjusted p-values (same order, capped at 1) and bool array of
        the rejected hypotheses at family-wise level ``alpha``.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, math.nan)
    reject = np.zeros(p.shape, dtype=bool)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    factors = np.arange(order.size, 0, -1)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * factors))
    kept = np.flatnonzero(p[order] > alpha / factors)
    reject[order[: kept[0] if kept.size else order.size]] = True
    return adjusted, reject
