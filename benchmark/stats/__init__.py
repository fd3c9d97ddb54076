"""Paired significance tests over seeds and dev examples (protocol.md §5-6).

Every comparison in the benchmark is *paired*: two methods prune copies of the same base model of a (task, seed),
so the unit of replication is the seed and the statistic is the per-seed difference ``d_s = a_s - b_s`` of a
task's primary metric. All functions here are pure (no I/O, no global RNG): randomness comes from a seeded
:class:`numpy.random.Generator`, so every number in a report is reproducible.

Units: the functions do not care; the report passes scores in percent points (``100 *`` the fraction that
``headprune_bench.benchmark.tasks.compute_metrics`` returns, MCC x 100).

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

Layout: :mod:`headprune_bench.benchmark.stats.paired` (differences, rounding), :mod:`headprune_bench.benchmark.stats.significance` (tests,
Holm), :mod:`headprune_bench.benchmark.stats.bootstrap` (intervals); this module combines them per comparison and exports every
name of the three.
"""
from __future__ import annotations

from headprune_bench.benchmark.stats.bootstrap import (
    METRICS,
    bootstrap_ci,
    mean_ci_t,
    resampled_metric,
    two_level_bootstrap,
)
from headprune_bench.benchmark.stats.compare import PairedStats, WithWithout, compare, compare_with_without
from headprune_bench.benchmark.stats.paired import (
    ROUNDING_ULPS,
    describe,
    paired_differences,
    rounding_tolerance,
    snap_differences,
)
from headprune_bench.benchmark.stats.significance import (
    EXACT_MAX_N,
    holm,
    min_exact_p,
    min_holm_p,
    paired_t_test,
    sign_flip_test,
    wilcoxon_test,
)

__all__ = [
    "METRICS",
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
    "PairedStats",
    "WithWithout",
    "compare",
    "compare_with_without",
]
