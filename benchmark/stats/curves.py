"""Accuracy-sparsity curves: the normalised area under a score curve and the area above chance, paired comparisons
of per-seed areas, and the Jaccard overlap of pruned head sets with its exact expectation for random sets
(hypergeometric)."""
from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from headprune_bench.benchmark.stats.bootstrap import bootstrap_ci
from headprune_bench.benchmark.stats.paired import describe, magnitude, paired_differences
from headprune_bench.benchmark.stats.significance import holm, min_exact_p, sign_flip_test


def normalised_area(fractions: Sequence[float], scores: Sequence[float], unpruned_score: float) -> float:
    """Trapezoid area under score vs fraction of heads pruned, from ``(0, unpruned_score)`` through the sorted
    ``(fraction, score)`` points, divided by the largest fraction: score units (a flat curve at s gives s).

    Raises:
        ValueError: no points, lengths differ, NaN/inf, a fraction outside (0, 1], or a fraction twice.
    """
    f, s = np.asarray(fractions, dtype=float), np.asarray(scores, dtype=float)
    if f.ndim != 1 or s.shape != f.shape:
        raise ValueError(f"fractions {f.shape} and scores {s.shape} must be 1-D of the same length")
    if f.size == 0:
        raise ValueError("no (fraction, score) points: an area needs at least one pruned level")
    if not (np.all(np.isfinite(f)) and np.all(np.isfinite(s)) and math.isfinite(unpruned_score)):
        raise ValueError(f"NaN or infinite value in fractions {f.tolist()}, scores {s.tolist()} or unpruned score "
                         f"{unpruned_score}")
    if np.any((f <= 0) | (f > 1)):
        raise ValueError(f"fractions must be in (0, 1], got {f.tolist()}")
    if np.unique(f).size != f.size:
        raise ValueError(f"duplicate fractions {f.tolist()}: one score per level")
    order = np.argsort(f)
    x = np.r_[0.0, f[order]]
    y = np.r_[float(unpruned_score), s[order]]
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2) / x[-1])


def area_above_chance(fractions: Sequence[float], scores: Sequence[float], unpruned_score: float,
                      majority: float, margin: float | None = None) -> float:
    """The share of a margin over chance that a curve keeps: the :func:`normalised_area` of
    ``max(score - majority, 0)`` at each point (the unpruned point included), divided by ``margin`` (default: this
    curve's own ``unpruned_score - majority``; the report passes the mean over seeds, one constant per panel, so
    that no seed weighs more than another). 1: the margin kept at every level; 0: chance or below everywhere.
    Points are clipped before the trapezoids, so a level below chance counts as chance, never as a loss below it.

    Raises:
        ValueError: as :func:`normalised_area`; a NaN ``majority`` or unpruned score; a margin <= 0 (no margin over
            chance to keep: the message says "not above the majority baseline").
    """
    if not (math.isfinite(majority) and math.isfinite(unpruned_score)):
        raise ValueError(f"majority {majority} and unpruned score {unpruned_score} must be finite")
    margin = float(unpruned_score) - float(majority) if margin is None else float(margin)
    if not margin > 0:
        raise ValueError(f"the margin {margin:g} over the majority baseline {majority:g} is not positive: the "
                         "reference is not above the majority baseline, no margin over chance to keep")
    above = np.maximum(np.asarray(scores, dtype=float) - majority, 0.0)
    return normalised_area(fractions, above, max(float(unpruned_score) - majority, 0.0)) / margin


@dataclass(frozen=True)
class AreaComparison:
    """Paired per-seed area differences ``a - b``: ``n`` seeds, mean, sample SD, 95% percentile bootstrap CI,
    exact two-sided sign-flip ``p_exact``, ``min_p`` the smallest p ``n`` seeds allow, ``p_holm`` (NaN until
    :func:`holm_areas`)."""

    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    p_exact: float
    min_p: float
    p_holm: float = math.nan


def area_comparison(areas_a: Sequence[float], areas_b: Sequence[float], n_boot: int = 10_000,
                    seed: int = 0) -> AreaComparison:
    """:class:`AreaComparison` of per-seed areas (paired by position). Raises ValueError: lengths differ, NaN."""
    d = paired_differences(areas_a, areas_b)
    desc = describe(d)
    low, high = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    scale = magnitude(np.asarray(areas_a, float), np.asarray(areas_b, float))
    p = sign_flip_test(d, seed=seed, scale=scale)["p"]
    return AreaComparison(n=desc["n"], mean=desc["mean"], sd=desc["sd"], ci_low=low, ci_high=high, p_exact=p,
                          min_p=min_exact_p(d.size) if d.size else math.nan)


def holm_areas(comparisons: Sequence[AreaComparison]) -> list[AreaComparison]:
    """``comparisons`` with ``p_holm`` set, Holm over the ones with a finite ``p_exact`` (one family)."""
    adjusted, _ = holm([c.p_exact for c in comparisons])
    return [replace(c, p_holm=float(p)) for c, p in zip(comparisons, adjusted)]


# --------------------------------------------------------------------------- head sets


def jaccard(pruned_a: Collection[Hashable], pruned_b: Collection[Hashable]) -> float:
    """``|A ∩ B| / |A ∪ B|`` of two sets of pruned heads; 1.0 when both are empty."""
    a, b = set(pruned_a), set(pruned_b)
    union = len(a | b)
    return 1.0 if union == 0 else len(a & b) / union


def mean_pairwise_jaccard(sets: Sequence[Collection[Hashable]]) -> float:
    """Mean :func:`jaccard` over every unordered pair of ``sets``; NaN with fewer than two sets."""
    values = [jaccard(a, b) for a, b in combinations(sets, 2)]
    return float(np.mean(values)) if values else math.nan


def expected_random_jaccard(total: int, k_a: int, k_b: int) -> float:
    """Exact E[Jaccard] of two independent uniform random subsets of sizes ``k_a``, ``k_b`` of ``total`` heads:
    the overlap X is hypergeometric, E = sum_x P(X = x) x / (k_a + k_b - x); 1.0 when both sizes are 0.

    Raises:
        ValueError: a size outside [0, total].
    """
    from scipy.stats import hypergeom

    if total < 0 or not (0 <= k_a <= total and 0 <= k_b <= total):
        raise ValueError(f"set sizes {k_a}, {k_b} must be in [0, total={total}]")
    if k_a == 0 and k_b == 0:
        return 1.0
    x = np.arange(max(0, k_a + k_b - total), min(k_a, k_b) + 1)
    pmf = hypergeom.pmf(x, total, k_a, k_b)
    return float(np.sum(pmf * x / (k_a + k_b - x)))


def expected_mean_pairwise_jaccard(total: int, sizes: Sequence[int]) -> float:
    """Expected :func:`mean_pairwise_jaccard` of independent uniform random sets of the given ``sizes`` (exact);
    NaN with fewer than two sizes."""
    values = [expected_random_jaccard(total, a, b) for a, b in combinations([int(k) for k in sizes], 2)]
    return float(np.mean(values)) if values else math.nan
