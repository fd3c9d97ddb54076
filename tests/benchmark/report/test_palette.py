"""The methods' fixed plot colours can be told apart (docs/choices.md, "Order and colours of methods")."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from headprune_bench.benchmark.report.units import EXTRA_COLORS, method_color, method_colors
from headprune_bench.benchmark.store.records import CONTROL_NAME, ORIGINAL

MIN_DELTA_E = 25.0


def _lab(color: str) -> np.ndarray:
    """CIELAB (D65) of an sRGB ``#RRGGBB``."""
    rgb = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                    [0.0193339, 0.1191920, 0.9503041]]) @ linear
    t = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _delta_e(a: str, b: str) -> float:
    return float(np.linalg.norm(_lab(a) - _lab(b)))


def test_lab_of_known_colours():
    assert _lab("#FFFFFF") == pytest.approx([100, 0, 0], abs=0.01)
    assert _lab("#000000") == pytest.approx([0, 0, 0], abs=1e-9)
    assert _lab("#FF0000") == pytest.approx([53.24, 80.09, 67.20], abs=0.02)


def test_every_two_methods_fixed_colours_are_far_enough_apart():
    colors = {n: c for n, c in method_colors().items() if n not in (ORIGINAL, CONTROL_NAME)}
    assert {"random", "michel", "voita", "dsp", "redundancy", "kwon", "auber"} <= set(colors)
    close = [(a, b, round(_delta_e(colors[a], colors[b]), 1)) for a, b in itertools.combinations(colors, 2)
             if _delta_e(colors[a], colors[b]) < MIN_DELTA_E]
    assert close == []
    assert _delta_e("#CC6677", colors["redundancy"]) < MIN_DELTA_E  # kwon's former rose: the rule rejects it


def test_extra_colours_are_none_of_the_fixed_ones_and_the_first_four_stand_apart_from_them():
    fixed = {c for n, c in method_colors().items() if n != CONTROL_NAME}
    assert not fixed & set(EXTRA_COLORS)
    assert all(_delta_e(e, f) >= MIN_DELTA_E for e in EXTRA_COLORS[:4] for f in fixed)
    assert method_color("a-new-method", ["a-new-method"]) == EXTRA_COLORS[0]
