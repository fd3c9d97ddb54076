"""Tests of headprune_bench.benchmark.stats.curves: hand-computed areas, exact p-values, Holm, Jaccard and the exact
hypergeometric expectation of a random Jaccard against brute-force enumeration."""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from headprune_bench.benchmark.stats.curves import (
    area_comparison,
    expected_mean_pairwise_jaccard,
    expected_random_jaccard,
    holm_areas,
    jaccard,
    mean_pairwise_jaccard,
    normalised_area,
)


def test_area_of_a_hand_computed_curve():
    # from (0, 0.80): (0.8+0.8)/2*0.1 = 0.08; (0.8+0.7)/2*0.4 = 0.30; (0.7+0.4)/2*0.4 = 0.22; sum 0.60; /0.9 = 2/3
    area = normalised_area([0.1, 0.5, 0.9], [0.80, 0.70, 0.40], 0.80)
    assert area == pytest.approx(0.60 / 0.9) and area == pytest.approx(2 / 3)
    # the points' order does not matter
    assert normalised_area([0.9, 0.1, 0.5], [0.40, 0.80, 0.70], 0.80) == pytest.approx(2 / 3)


def test_a_flat_curve_has_its_score_as_area_and_one_point_is_a_trapezoid():
    assert normalised_area([0.25, 0.5, 1.0], [0.7, 0.7, 0.7], 0.7) == pytest.approx(0.7)
    # (0.9 + 0.5) / 2 * 0.5, divided by 0.5
    assert normalised_area([0.5], [0.5], 0.9) == pytest.approx(0.7)
    assert normalised_area([0.5], [-0.2], 0.4) == pytest.approx(0.1)  # MCC may be negative


@pytest.mark.parametrize("fractions, scores, unpruned, message", [
    ([], [], 0.8, r"no \(fraction, score\) points"),
    ([0.0, 0.5], [0.8, 0.7], 0.8, r"must be in \(0, 1\]"),
    ([0.5, 1.2], [0.8, 0.7], 0.8, r"must be in \(0, 1\]"),
    ([0.5, 0.5], [0.8, 0.7], 0.8, "duplicate fractions"),
    ([0.5, 0.6], [0.8, math.nan], 0.8, "NaN"),
    ([0.5, 0.6], [0.8, 0.7], math.nan, "NaN"),
    ([0.5, 0.6], [0.8], 0.8, "same length"),
])
def test_area_errors_say_what_is_wrong(fractions, scores, unpruned, message):
    with pytest.raises(ValueError, match=message):
        normalised_area(fractions, scores, unpruned)


def test_area_comparison_exact_p_values_counted_by_hand():
    # 5 seeds, every difference positive: only the observed pattern and its mirror reach |mean|: 2/32
    c = area_comparison([0.7, 0.72, 0.69, 0.71, 0.75], [0.6, 0.61, 0.62, 0.6, 0.64], n_boot=500)
    assert c.n == 5 and c.p_exact == pytest.approx(2 / 32) and c.min_p == pytest.approx(0.0625)
    assert c.mean == pytest.approx(np.mean([0.1, 0.11, 0.07, 0.11, 0.11]))
    assert c.sd == pytest.approx(np.std([0.1, 0.11, 0.07, 0.11, 0.11], ddof=1))
    assert c.ci_low <= c.mean <= c.ci_high and math.isnan(c.p_holm)
    # 6 seeds, differences 1..5 and -0.5: |sum| >= 14.5 only for the observed pattern (14.5), the one with -0.5
    # flipped (15.5) and their two mirrors: flipping any of 1..5 gives at most 15 - 2 + 0.5 = 13.5. p = 4/64
    b = np.zeros(6)
    c6 = area_comparison(np.array([1, 2, 3, 4, 5, -0.5]) / 10, b, n_boot=500)
    assert c6.p_exact == pytest.approx(4 / 64) and c6.min_p == pytest.approx(2 / 64)


def test_holm_over_a_known_family():
    # sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04 -> max so far 0.06
    base = area_comparison([0.1, 0.2], [0.0, 0.0], n_boot=10)
    fam = [dataclasses.replace(base, p_exact=p) for p in (0.01, 0.04, 0.03, math.nan)]
    adjusted = [c.p_holm for c in holm_areas(fam)]
    np.testing.assert_allclose(adjusted[:3], [0.03, 0.06, 0.06])
    assert math.isnan(adjusted[3])


def test_jaccard_known_values():
    assert jaccard({1, 2, 3}, {2, 3, 4}) == pytest.approx(0.5)
    assert jaccard(set(), set()) == 1.0 and jaccard({(0, 1)}, set()) == 0.0 and jaccard({1, 2}, [2, 1]) == 1.0
    # pairs: {1,2}/{2,3} = 1/3, {1,2}/{1,2} = 1, {2,3}/{1,2} = 1/3 -> mean 5/9
    assert mean_pairwise_jaccard([{1, 2}, {2, 3}, {1, 2}]) == pytest.approx(5 / 9)
    assert math.isnan(mean_pairwise_jaccard([{1}]))


def _brute_force(total, k_a, k_b):
    values = [jaccard(a, b) for a in itertools.combinations(range(total), k_a)
              for b in itertools.combinations(range(total), k_b)]
    return float(np.mean(values))


def test_random_jaccard_expectation_is_exact():
    # overlap X of a 2-set and a 3-set of 6: P(0) = 4/20, P(1) = 12/20, P(2) = 4/20; E = .6/4 + .2*2/3 = 17/60
    assert expected_random_jaccard(6, 2, 3) == pytest.approx(17 / 60)
    assert expected_random_jaccard(6, 2, 3) == pytest.approx(_brute_force(6, 2, 3))
    for total, k_a, k_b in ((5, 1, 4), (6, 3, 3), (4, 0, 2), (5, 5, 2)):
        assert expected_random_jaccard(total, k_a, k_b) == pytest.approx(_brute_force(total, k_a, k_b))
    assert expected_random_jaccard(6, 0, 0) == 1.0
    sizes = [2, 2, 3]
    want = np.mean([_brute_force(6, 2, 2), _brute_force(6, 2, 3), _brute_force(6, 2, 3)])
    assert expected_mean_pairwise_jaccard(6, sizes) == pytest.approx(want)
    with pytest.raises(ValueError, match="must be in"):
        expected_random_jaccard(6, 7, 1)
