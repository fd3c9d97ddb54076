"""Tests of benchmark.stats against values computed independently (definitions, closed forms, statsmodels).

Fast: the whole file runs in a few seconds (small bootstrap sizes where the property allows).
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps
from sklearn.metrics import matthews_corrcoef
from statsmodels.stats.multitest import multipletests

from benchmark import stats
from benchmark.tasks import compute_metrics


def exact_p_by_definition(diffs) -> float:
    """Two-sided sign-flip p from the definition, in exact rational arithmetic (no float ties to worry about)."""
    d = [Fraction(x).limit_denominator(10**9) for x in diffs]
    observed = abs(sum(d))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=len(d))
               if abs(sum(s * x for s, x in zip(signs, d))) >= observed)
    return hits / 2 ** len(d)


# --------------------------------------------------------------------------- sign-flip test


def test_exact_p_five_seeds_all_improving_is_0_0625():
    diffs = [0.4, 1.1, 0.2, 2.0, 0.7]  # every seed improves
    by_definition = exact_p_by_definition(diffs)
    assert by_definition == pytest.approx(2 / 32)
    res = stats.sign_flip_test(diffs)
    assert res["exact"] and res["n"] == 5
    assert res["p"] == pytest.approx(0.0625, abs=1e-15)
    assert res["statistic"] == pytest.approx(np.mean(diffs))


@pytest.mark.parametrize("seed", range(4))
def test_exact_p_equals_definition_on_random_mixed_signs(seed):
    rng = np.random.default_rng(seed)
    diffs = rng.normal(0.3, 1.0, size=7)
    assert stats.sign_flip_test(diffs)["p"] == pytest.approx(exact_p_by_definition(diffs), abs=1e-12)


def test_exact_p_counts_float_ties():
    # accuracy differences are multiples of 1/N: sums that are equal in exact arithmetic must count as ties
    diffs = [1 / 64, 3 / 64, -1 / 64, 2 / 64, 1 / 64, -3 / 64]
    assert stats.sign_flip_test(diffs)["p"] == pytest.approx(exact_p_by_definition(diffs), abs=1e-12)


def test_sign_flip_degenerate_inputs():
    assert stats.sign_flip_test([0.0, 0.0, 0.0])["p"] == 1.0
    assert math.isnan(stats.sign_flip_test([])["p"])
    assert stats.sign_flip_test([0.5])["p"] == 1.0  # one seed: +d and -d both reach |d|


def test_monte_carlo_branch_agrees_with_enumeration_above_16_seeds():
    rng = np.random.default_rng(7)
    diffs = rng.normal(0.25, 1.0, size=17)
    signs = 1.0 - 2.0 * ((np.arange(2**17)[:, None] >> np.arange(17)) & 1)  # enumerated here, not in the code
    exact = np.mean(np.abs(signs @ diffs) >= abs(diffs.sum()) - 1e-12)
    res = stats.sign_flip_test(diffs, n_mc=20_000, seed=1)
    assert not res["exact"]
    se = math.sqrt(exact * (1 - exact) / 20_000)
    assert abs(res["p"] - exact) < 4 * se + 1e-4
    assert res["p"] == stats.sign_flip_test(diffs, n_mc=20_000, seed=1)["p"]  # seeded: reproducible
    assert stats.sign_flip_test(np.ones(20), n_mc=1000)["p"] >= 1 / 1001  # never 0


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 10])
def test_min_exact_p_is_reached_by_all_positive_differences(n):
    assert stats.min_exact_p(n) == pytest.approx(min(1.0, 2 / 2**n))
    assert stats.sign_flip_test(np.linspace(0.1, 1.0, n))["p"] == pytest.approx(stats.min_exact_p(n))


def test_min_p_values():
    assert stats.min_exact_p(5) == 0.0625  # 5 seeds can never reach p < .05
    assert stats.min_exact_p(6) == 0.03125
    assert stats.min_exact_p(10) == pytest.approx(0.001953125)
    assert math.isnan(stats.min_exact_p(0))
    assert stats.min_holm_p(10, 20) == pytest.approx(20 * 2 / 1024)  # 10 seeds allow Holm over 20 comparisons
    assert stats.min_holm_p(10, 20) < 0.05
    assert stats.min_holm_p(5, 3) == 0.1875


# --------------------------------------------------------------------------- Holm


def holm_by_hand(p):
    """Holm (1979) step-down: sort ascending, multiply the i-th smallest (0-based) by m - i, running max, cap at 1."""
    p = np.asarray(p, float)
    m = p.size
    order = np.argsort(p)
    adjusted = np.empty(m)
    running = 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[j]))
        adjusted[j] = running
    return adjusted


def test_holm_small_example_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.02, 0.03, 0.06, 0.06
    expected = [0.03, 0.06, 0.06, 0.02]
    adjusted, reject = stats.holm(p)
    np.testing.assert_allclose(adjusted, expected)
    np.testing.assert_allclose(holm_by_hand(p), expected)
    assert reject.tolist() == [True, False, False, True]


@pytest.mark.parametrize("seed", range(5))
def test_holm_equals_statsmodels_and_hand_rule_on_random_p_values(seed):
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.uniform(0, 1, 15), rng.uniform(0, 0.01, 5)])
    adjusted, reject = stats.holm(p)
    sm_reject, sm_adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
    np.testing.assert_allclose(adjusted, sm_adjusted)
    np.testing.assert_array_equal(reject, sm_reject)
    np.testing.assert_allclose(adjusted, holm_by_hand(p))


def test_holm_leaves_nan_out_of_the_family():
    adjusted, reject = stats.holm([0.01, math.nan, 0.02])
    np.testing.assert_allclose(adjusted[[0, 2]], [0.02, 0.02])
    assert math.isnan(adjusted[1]) and not reject[1]


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_covers_the_true_difference_at_about_the_nominal_rate():
    rng = np.random.default_rng(2024)
    true, hits, experiments = 0.5, 0, 200
    for k in range(experiments):
        diffs = rng.normal(true, 1.0, size=30)
        low, high = stats.bootstrap_ci(diffs, n_boot=1000, seed=k)
        hits += low <= true <= high
    coverage = hits / experiments
    assert 0.88 <= coverage <= 0.99, coverage


def test_bootstrap_ci_basic_properties():
    d = [0.5, 1.0, 1.5, 2.0]
    low, high = stats.bootstrap_ci(d, n_boot=2000, seed=3)
    assert min(d) <= low <= np.mean(d) <= high <= max(d)
    assert (low, high) == stats.bootstrap_ci(d, n_boot=2000, seed=3)
    assert all(math.isnan(x) for x in stats.bootstrap_ci([1.0]))
    with pytest.raises(ValueError):
        stats.bootstrap_ci([1.0, float("nan")])


def test_describe_uses_sample_sd():
    d = stats.describe([1.0, 2.0, 4.0])
    assert d["n"] == 3 and d["mean"] == pytest.approx(7 / 3)
    assert d["sd"] == pytest.approx(math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2))
    assert math.isnan(stats.describe([1.0])["sd"])


@pytest.mark.parametrize("metric", ["accuracy", "matthews_correlation"])
def test_resampled_metric_equals_compute_metrics(metric):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 80)
    preds = np.where(rng.random(80) < 0.75, labels, 1 - labels)
    idx = rng.integers(0, 80, size=(25, 80))
    got = stats.resampled_metric(preds, labels, idx, metric)
    task = "mrpc" if metric == "accuracy" else "cola"
    want = [compute_metrics(task, preds[row], labels[row])[metric] for row in idx]
    np.testing.assert_allclose(got, want, atol=1e-12)
    # constant predictions: MCC is 0 (sklearn's convention), accuracy the class share
    const = np.ones(80, dtype=int)
    full = np.arange(80)[None, :]
    assert stats.resampled_metric(const, labels, full, metric)[0] == pytest.approx(
        compute_metrics(task, const, labels)[metric])


def test_resampled_mcc_multiclass_equals_sklearn():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, 60)
    preds = np.where(rng.random(60) < 0.6, labels, rng.integers(0, 3, 60))
    idx = rng.integers(0, 60, size=(10, 60))
    got = stats.resampled_metric(preds, labels, idx, "matthews_correlation")
    np.testing.assert_allclose(got, [matthews_corrcoef(labels[r], preds[r]) for r in idx], atol=1e-12)


def _simulated_seeds(rng, n_seeds, n_examples, delta):
    labels, pa, pb = [], [], []
    for _ in range(n_seeds):
        y = rng.integers(0, 2, n_examples)
        shift = rng.normal(0, 0.02)  # seed-to-seed variation of both methods' accuracy
        acc_b = 0.75 + shift
        acc_a = acc_b + delta + rng.normal(0, 0.01)
        pa.append(np.where(rng.random(n_examples) < acc_a, y, 1 - y))
        pb.append(np.where(rng.random(n_examples) < acc_b, y, 1 - y))
        labels.append(y)
    return pa, pb, labels


def test_two_level_bootstrap_estimate_and_coverage():
    rng = np.random.default_rng(11)
    pa, pb, labels = _simulated_seeds(rng, 5, 100, 0.05)
    res = stats.two_level_bootstrap(pa, pb, labels, "accuracy", n_boot=300, seed=0)
    want = np.mean([compute_metrics("rte", a, y)["accuracy"] - compute_metrics("rte", b, y)["accuracy"]
                    for a, b, y in zip(pa, pb, labels)])
    assert res["estimate"] == pytest.approx(want)
    assert res["low"] <= res["estimate"] <= res["high"]
    mcc = stats.two_level_bootstrap(pa, pb, labels, "matthews_correlation", n_boot=300, seed=0)
    want_mcc = np.mean([matthews_corrcoef(y, a) - matthews_corrcoef(y, b) for a, b, y in zip(pa, pb, labels)])
    assert mcc["estimate"] == pytest.approx(want_mcc)
    # coverage of the true mean difference (0.05): the two-level interval counts example noise twice, so it is
    # at least nominal (conservative), never badly under-covering
    hits = 0
    for k in range(60):
        pa, pb, labels = _simulated_seeds(rng, 8, 150, 0.05)
        r = stats.two_level_bootstrap(pa, pb, labels, "accuracy", n_boot=250, seed=k)
        hits += r["low"] <= 0.05 <= r["high"]
    assert hits / 60 >= 0.85


def test_two_level_bootstrap_errors():
    with pytest.raises(ValueError):
        stats.two_level_bootstrap([[0, 1]], [[0, 1], [1, 1]], [[0, 1]], "accuracy")
    with pytest.raises(ValueError):
        stats.two_level_bootstrap([[0, 1]], [[0, 1, 1]], [[0, 1]], "accuracy")
    with pytest.raises(ValueError):
        stats.two_level_bootstrap([[0, 1]], [[0, 1]], [[0, 1]], "f1")
    assert math.isnan(stats.two_level_bootstrap([], [], [], "accuracy")["estimate"])


# --------------------------------------------------------------------------- secondary tests


def test_wilcoxon_on_fixed_input_equals_exact_enumeration():
    d = np.array([1.5, -0.5, 2.0, 3.0, 2.5])
    # ranks of |d|: 0.5->1, 1.5->2, 2.0->3, 2.5->4, 3.0->5; W- = 1, W+ = 14; two-sided statistic min(W+, W-) = 1
    ranks = sps.rankdata(np.abs(d))
    w_plus = ranks[d > 0].sum()
    assert w_plus == 14
    # exact null: each rank's sign is +/- with probability 1/2
    null = [sum(r for r, s in zip(range(1, 6), signs) if s) for signs in itertools.product((0, 1), repeat=5)]
    p_exact = np.mean([min(w, 15 - w) <= 1 for w in null])
    assert p_exact == 0.125
    res = stats.wilcoxon_test(d)
    assert res["statistic"] == 1.0
    assert res["p"] == pytest.approx(p_exact)


def test_paired_t_test_on_fixed_input_equals_formula():
    a = np.array([80.0, 82.0, 83.0, 85.0, 86.5])
    b = np.array([79.0, 80.0, 80.0, 81.0, 81.0])
    d = a - b  # 1, 2, 3, 4, 5.5
    t = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    x = t * t / 4  # closed-form CDF of Student's t with 4 degrees of freedom
    cdf = 0.5 + 3 / 8 * (t / math.sqrt(1 + x)) * (1 - x / (3 * (1 + x)))
    res = stats.paired_t_test(a, b)
    assert res["statistic"] == pytest.approx(t, rel=1e-12)
    assert res["df"] == 4
    assert res["p"] == pytest.approx(2 * (1 - cdf), rel=1e-9)


def test_secondary_tests_are_nan_with_a_note_when_undefined():
    zero = stats.wilcoxon_test([0.0, 0.0, 0.0])
    assert math.isnan(zero["p"]) and "zero" in zero["note"]
    one = stats.wilcoxon_test([0.3])
    assert math.isnan(one["p"]) and "n=1" in one["note"]
    const = stats.paired_t_test([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])
    assert math.isnan(const["p"]) and "constant" in const["note"]
    assert math.isnan(stats.paired_t_test([1.0], [0.0])["p"])
    res = stats.compare([0.8, 0.8], [0.8, 0.8])
    assert res["p_exact"] == 1.0 and math.isnan(res["p_wilcoxon"]) and math.isnan(res["p_t"]) and res["notes"]


# --------------------------------------------------------------------------- degenerate seeds


def test_degenerate_seeds_are_excluded_only_from_the_clean_statistics():
    a = np.array([85.0, 86.0, 84.0, 31.6, 85.5, 86.5])  # seed 3: a failed run
    b = np.array([84.0, 84.5, 83.0, 84.0, 84.0, 85.0])
    bad = np.array([False, False, False, True, False, False])
    res = stats.compare_with_without(a, b, bad, n_boot=500)
    assert res["n_all"] == 6 and res["n_excluded"] == 1
    assert res["all"]["n"] == 6 and res["clean"]["n"] == 5
    assert res["all"]["mean_diff"] == pytest.approx(np.mean(a - b))
    assert res["clean"]["mean_diff"] == pytest.approx(np.mean((a - b)[~bad]))
    assert res["clean"]["mean_diff"] > 0 > res["all"]["mean_diff"]
    assert res["clean"]["p_exact"] == pytest.approx(exact_p_by_definition((a - b)[~bad]))
    assert res["clean"] == stats.compare(a[~bad], b[~bad], n_boot=500)
    with pytest.raises(ValueError):
        stats.compare_with_without(a, b, bad[:3])
