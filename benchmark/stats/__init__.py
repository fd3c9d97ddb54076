"""Paired statistics over seeds (and dev examples); pure functions, randomness from a seeded Generator.

Units are the inputs' (the report passes percent points). Sources: percentile bootstrap over seeds (Efron &
Tibshirani 1993, ch. 13); exact two-sided sign-flip test, all ``2**n`` patterns for n <= 16, Monte Carlo above
(Good 2005 §3.3; Dror et al. 2018); Wilcoxon and paired t (scipy); two-level bootstrap, seeds then dev examples
(Davison & Hinkley 1997 §3.8; Bouthillier et al. 2021); Holm 1979 (checked against statsmodels). See docs/reports.md.
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
