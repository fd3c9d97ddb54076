"""The area above chance (stats.curves.area_above_chance) against hand-computed values."""
from __future__ import annotations

import pytest

from headprune_bench.benchmark.stats.curves import area_above_chance


def test_a_curve_that_dips_below_the_majority_counts_there_as_chance():
    # margin 0.85 - 0.50 = 0.35; points above chance: 0.35 (f=0), 0.30, 0.10, and -0.10 clipped to 0 at f=1.
    # trapezoids: .25*(.35+.30)/2 + .25*(.30+.10)/2 + .5*(.10+0)/2 = 5/32; / f_K = 1 / margin 7/20 -> 25/56.
    value = area_above_chance([0.25, 0.5, 1.0], [0.80, 0.60, 0.40], unpruned_score=0.85, majority=0.50)
    assert value == pytest.approx(25 / 56, rel=1e-12)
    # without the clip the last trapezoid would be 0 and the area 0.13125 / 0.35 = 0.375: the dip is not a loss
    assert value != pytest.approx(0.375)


def test_order_of_points_does_not_matter_and_the_range_normalises():
    a = area_above_chance([0.6, 0.3], [0.55, 0.65], unpruned_score=0.70, majority=0.50)
    # y: .20, .15 (f=.3), .05 (f=.6); (.3*(.20+.15)/2 + .3*(.15+.05)/2) / .6 / .20 = 0.6875
    assert a == pytest.approx(0.6875, rel=1e-12)
    assert area_above_chance([0.3, 0.6], [0.65, 0.55], 0.70, 0.50) == a


@pytest.mark.parametrize(("scores", "expected"), [([0.7, 0.7, 0.7], 1.0), ([0.5, 0.4, 0.2], 0.5 * 0.25 / 0.75)])
def test_margin_kept_everywhere_is_one_and_chance_everywhere_leaves_only_the_first_trapezoid(scores, expected):
    assert area_above_chance([0.25, 0.5, 0.75], scores, 0.7, 0.5) == pytest.approx(expected, rel=1e-12)


def test_mcc_with_majority_zero_and_a_better_than_reference_curve_exceeds_one():
    assert area_above_chance([0.5], [0.40], unpruned_score=0.30, majority=0.0) == pytest.approx(
        (0.5 * (0.30 + 0.40) / 2) / 0.5 / 0.30, rel=1e-12)


@pytest.mark.parametrize("unpruned", [0.5, 0.45])
def test_a_reference_not_above_chance_is_refused(unpruned):
    with pytest.raises(ValueError, match="not above the majority baseline"):
        area_above_chance([0.5], [0.6], unpruned_score=unpruned, majority=0.5)


def test_bad_points_are_refused_as_for_the_plain_area():
    with pytest.raises(ValueError, match="duplicate fractions"):
        area_above_chance([0.5, 0.5], [0.6, 0.6], 0.7, 0.5)
    with pytest.raises(ValueError, match="must be finite"):
        area_above_chance([0.5], [0.6], 0.7, float("nan"))


def test_a_given_margin_replaces_the_curves_own_and_only_scales_the_area():
    own = area_above_chance([0.25, 0.5, 1.0], [0.80, 0.60, 0.40], unpruned_score=0.85, majority=0.50)
    shared = area_above_chance([0.25, 0.5, 1.0], [0.80, 0.60, 0.40], 0.85, 0.50, margin=0.25)
    assert shared == pytest.approx(own * 0.35 / 0.25, rel=1e-12)  # 5/32 / 0.25
    # a seed whose reference is at chance keeps a curve of zeros under a shared margin, instead of being refused
    assert area_above_chance([0.5], [0.7], unpruned_score=0.5, majority=0.5, margin=0.2) == pytest.approx(
        (0.5 * (0.0 + 0.2) / 2) / 0.5 / 0.2, rel=1e-12)
    with pytest.raises(ValueError, match="not above the majority baseline"):
        area_above_chance([0.5], [0.7], 0.6, 0.5, margin=0.0)
