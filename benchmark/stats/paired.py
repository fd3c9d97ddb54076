"""Paired differences, their description, and the one rule for "equal up to float64 rounding" that every
statistic of :mod:`headprune_bench.benchmark.stats` applies."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

#: :func:`rounding_tolerance` in units of float64 machine epsilon times the scores' magnitude (2**10).
ROUNDING_ULPS = 1024


def as_vector(x: Any, name: str) -> np.ndarray:
    """``x`` as a 1-D float array; ValueError (naming ``name``) when not 1-D or not finite."""
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return arr


def make_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A Generator: ``seed`` itself when it is one, else ``numpy.random.default_rng(seed)``."""
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def paired_differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """Per-seed differences ``a - b``.

    Args:
        a, b: 1-D sequences of the same length n, element s being seed s's score of each method
            (any unit; the result has the same unit).

    Returns:
        float array of shape (n,).

    Raises:
        ValueError: not 1-D, different lengths, or non-finite values.
    """
    a, b = as_vector(a, "a"), as_vector(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.size} vs {b.size}")
    return a - b


def magnitude(*samples: Any) -> float:
    """Largest |value| over the given arrays (0.0 when all are empty): the magnitude rounding errors scale with."""
    return max((float(np.max(np.abs(x))) for x in samples if np.size(x)), default=0.0)


def rounding_tolerance(scale: float) -> float:
    """Absolute tolerance below which two paired differences count as equal up to float64 rounding:
    ``ROUNDING_ULPS * eps64 * |scale|`` (~2.3e-13 * scale), ``scale`` the magnitude of the scores the differences
    came from (``max |a|, |b|``). Why this size: docs/choices.md ("Equal up to rounding")."""
    return ROUNDING_ULPS * float(np.finfo(np.float64).eps) * abs(float(scale))


def snap_differences(diffs: Sequence[float], scale: float | None = None) -> np.ndarray:
    """``diffs`` with float64 rounding noise removed: the shared rule of every test statistic here.

    With ``tol = rounding_tolerance(max(scale, max|diffs|))``: a difference with ``|d| <= tol`` becomes exactly
    0, and magnitudes ``|d|`` within ``tol`` of each other (sorted, consecutive gaps ``<= tol``) become exactly
    equal (the smallest of the group; the sign is kept). So differences equal up to rounding are *constant*
    (ptp 0, SD 0, the t-test undefined), all-zero-up-to-rounding differences are all zero (Wilcoxon undefined,
    sign-flip p = 1), and ``+x`` and ``-x`` computed along two float paths are tied in Wilcoxon's ranks.

    Args:
        diffs: 1-D per-seed differences ``a - b``.
        scale: magnitude of the scores ``a``, ``b`` the differences came from (``max |a|, |b|``); None: the
            differences' own largest magnitude (enough unless every difference is tiny next to the scores -
            pass the scale when the scores are known, as :func:`compare` does).

    Returns:
        float array of the same shape; each element moved by at most ``tol`` times the group size.
    """
    d = as_vector(diffs, "diffs")
    if d.size == 0:
        return d.copy()
    tol = rounding_tolerance(max(magnitude(d), 0.0 if scale is None else abs(float(scale))))
    mag = np.abs(d)
    mag[mag <= tol] = 0.0
    order = np.argsort(mag, kind="stable")
    sorted_mag = mag[order]
    snapped = sorted_mag.copy()
    for i in range(1, sorted_mag.size):
        if sorted_mag[i] - sorted_mag[i - 1] <= tol:
            snapped[i] = snapped[i - 1]  # same group: the group's smallest magnitude
    out = np.empty_like(d)
    out[order] = snapped
    return np.where(out == 0.0, 0.0, np.sign(d) * out)


def all_equal(snapped: np.ndarray) -> bool:
    """Whether the (snapped) differences are non-empty and all equal."""
    return snapped.size > 0 and bool(np.all(snapped == snapped[0]))


def describe(x: Sequence[float]) -> dict[str, float]:
    """``{"n", "mean", "sd"}`` of a sample; ``sd`` is the sample SD (ddof=1), NaN when n < 2; mean NaN when n = 0."""
    x = as_vector(x, "x")
    n = x.size
    return {"n": int(n), "mean": float(x.mean()) if n else math.nan,
            "sd": float(x.std(ddof=1)) if n > 1 else math.nan}

