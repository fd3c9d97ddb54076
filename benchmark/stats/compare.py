"""One comparison of two paired samples: every statistic of the package, with and without flagged seeds."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headprune_bench.benchmark.stats.bootstrap import bootstrap_ci
from headprune_bench.benchmark.stats.paired import (
    all_equal,
    as_vector,
    describe,
    magnitude,
    paired_differences,
    snap_differences,
)
from headprune_bench.benchmark.stats.significance import min_exact_p, paired_t_test, sign_flip_test, wilcoxon_test


@dataclass
class PairedStats:
    """Seed-level statistics of one paired comparison ``a - b``, in the inputs' unit.

    ``n`` pairs; means and sample SDs of ``a``, ``b`` and the differences; ``ci_low``/``ci_high`` the 95%
    bootstrap CI of the mean difference (:func:`bootstrap_ci`); ``p_exact`` the two-sided sign-flip p, not
    adjusted, ``exact`` False when it was estimated by Monte Carlo (:func:`sign_flip_test`); ``p_min`` the
    smallest p the test can give with ``n`` pairs (:func:`min_exact_p`); Wilcoxon and paired-t statistics and p;
    ``notes`` a "; "-joined string of everything that was undefined.
    """

    n: int
    mean_a: float
    sd_a: float
    mean_b: float
    sd_b: float
    mean_diff: float
    sd_diff: float
    ci_low: float
    ci_high: float
    p_exact: float
    exact: bool
    p_min: float
    wilcoxon_stat: float
    p_wilcoxon: float
    t_stat: float
    p_t: float
    notes: str


@dataclass
class WithWithout:
    """:func:`compare` over every seed (``all``) and over the seeds not flagged bad (``clean``)."""

    all: PairedStats
    clean: PairedStats
    n_all: int
    n_excluded: int


def compare(a: Sequence[float], b: Sequence[float], *, n_boot: int = 10_000, n_mc: int = 100_000,
            seed: int = 0) -> PairedStats:
    """Every seed-level statistic of one paired comparison ``a - b`` (same unit as the inputs).

    Differences equal up to float64 rounding (:func:`snap_differences`, scale ``max |a|, |b|``) are equal:
    ``sd_diff`` is 0.0 when they are constant.
    """
    d = paired_differences(a, b)
    scale = magnitude(np.asarray(a, float), np.asarray(b, float))
    da, db, dd = describe(a), describe(b), describe(d)
    if d.size > 1 and all_equal(snap_differences(d, scale)):
        dd["sd"] = 0.0
    low, high = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    perm = sign_flip_test(d, n_mc=n_mc, seed=seed, scale=scale)
    wil = wilcoxon_test(d, scale=scale)
    tt = paired_t_test(a, b)
    if d.size < 2:
        notes = [f"n={d.size}: no SD, CI, Wilcoxon or t-test"]
    else:
        notes = [x for x in (wil["note"], tt["note"]) if x]
    return PairedStats(n=dd["n"], mean_a=da["mean"], sd_a=da["sd"], mean_b=db["mean"], sd_b=db["sd"],
                       mean_diff=dd["mean"], sd_diff=dd["sd"], ci_low=low, ci_high=high,
                       p_exact=perm["p"], exact=perm["exact"], p_min=min_exact_p(d.size),
                       wilcoxon_stat=wil["statistic"], p_wilcoxon=wil["p"], t_stat=tt["statistic"], p_t=tt["p"],
                       notes="; ".join(dict.fromkeys(notes)))


def compare_with_without(a: Sequence[float], b: Sequence[float], bad: Sequence[bool], **kwargs: Any) -> WithWithout:
    """:func:`compare` on all seeds and on the seeds not flagged ``bad`` (protocol.md §6).

    Args:
        a, b: per-seed scores of the two methods (paired, same length).
        bad: per seed, True when either side of the pair is degenerate or its base model failed;
            such seeds are kept in ``"all"`` and dropped from ``"clean"``.
        **kwargs: passed to :func:`compare`.

    Raises:
        ValueError: ``a``, ``b`` and ``bad`` differ in length, or a score is not finite.
    """
    a, b = as_vector(a, "a"), as_vector(b, "b")
    bad = np.asarray(bad, dtype=bool)
    if not (a.shape == b.shape == bad.shape):
        raise ValueError(f"a {a.shape}, b {b.shape} and bad {bad.shape} must have the same length")
    return WithWithout(all=compare(a, b, **kwargs), clean=compare(a[~bad], b[~bad], **kwargs),
                       n_all=int(a.size), n_excluded=int(bad.sum()))
