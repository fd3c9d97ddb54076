"""One comparison of two paired samples: every statistic of the package, with and without flagged seeds."""
from __future__ import annotations

from collections.abc import Sequence
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
    a, b = as_vector(a, "a"), as_vector(b, "b")
    bad = np.asarray(bad, dtype=bool)
    if not (a.shape == b.shape == bad.shape):
        raise ValueError(f"a {a.shape}, b {b.shape} and bad {bad.shape} must have the same length")
    return {"all": compare(a, b, **kwargs), "clean": compare(a[~bad], b[~bad], **kwargs),
            "n_all": int(a.size), "n_excluded": int(bad.sum())}
