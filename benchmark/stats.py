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

Layout: :mod:`benchmark.stats_paired` (differences, rounding), :mod:`benchmark.stats_significance` (tests,
Holm), :mod:`benchmark.stats_bootstrap` (intervals); this module combines them per comparison and exports every
name of the three.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from benchmark.stats_bootstrap import (METRICS, bootstrap_ci, mean_ci_t, resampled_metric,  # noqa: F401
                                      two_level_bootstrap)
from benchmark.stats_paired import (ROUNDING_ULPS, _constant, _rng, _scale, _vector, describe,  # noqa: F401
                                    paired_differences, rounding_tolerance, snap_differences)
from benchmark.stats_significance import (EXACT_MAX_N, holm, min_exact_p, min_holm_p, paired_t_test, sign_flip_test,
                                          wilcoxon_test)

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
