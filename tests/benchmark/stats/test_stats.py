"""Tests of headprune_bench.benchmark.stats against values computed independently (definitions, closed forms,
statsmodels).

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

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.tasks import compute_metrics


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


@pytest.mark.parametrize("seed", range(5))
def test_holm_equals_statsmodels_on_tied_exact_p_values(seed):
    """Exact sign-flip p are multiples of 2/2^n, so families hold ties; some sit on a step's boundary alpha/(m-i)."""
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.integers(1, 33, 12) * 2 / 2**10, [0.05 / 12, 0.05 / 11, 0.05, 1.0]])
    rng.shuffle(p)
    adjusted, reject = stats.holm(p)
    sm_reject, sm_adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
    np.testing.assert_allclose(adjusted, sm_adjusted)
    np.testing.assert_array_equal(reject, sm_reject)
    assert len(set(p.tolist())) < p.size  # the family has ties


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


@pytest.mark.parametrize("a, b, labels, metric", [
    ([[0, 1]], [[0, 1], [1, 1]], [[0, 1]], "accuracy"),
    ([[0, 1]], [[0, 1, 1]], [[0, 1]], "accuracy"),
    ([[0, 1]], [[0, 1]], [[0, 1]], "f1"),
], ids=["seed-counts-differ", "example-counts-differ", "unknown-metric"])
def test_two_level_bootstrap_errors(a, b, labels, metric):
    with pytest.raises(ValueError):
        stats.two_level_bootstrap(a, b, labels, metric)


def test_two_level_bootstrap_of_no_seeds_is_nan():
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
    assert res.p_exact == 1.0 and math.isnan(res.p_wilcoxon) and math.isnan(res.p_t) and res.notes


# --------------------------------------------------------------------------- degenerate seeds


def test_degenerate_seeds_are_excluded_only_from_the_clean_statistics():
    a = np.array([85.0, 86.0, 84.0, 31.6, 85.5, 86.5])  # seed 3: a failed run
    b = np.array([84.0, 84.5, 83.0, 84.0, 84.0, 85.0])
    bad = np.array([False, False, False, True, False, False])
    res = stats.compare_with_without(a, b, bad, n_boot=500)
    assert res.n_all == 6 and res.n_excluded == 1
    assert res.all.n == 6 and res.clean.n == 5
    assert res.all.mean_diff == pytest.approx(np.mean(a - b))
    assert res.clean.mean_diff == pytest.approx(np.mean((a - b)[~bad]))
    assert res.clean.mean_diff > 0 > res.all.mean_diff
    assert res.clean.p_exact == pytest.approx(exact_p_by_definition((a - b)[~bad]))
    assert res.clean == stats.compare(a[~bad], b[~bad], n_boot=500)
    with pytest.raises(ValueError):
        stats.compare_with_without(a, b, bad[:3])


# --------------------------------------------------------------------------- differences equal up to float rounding
# Issue 10, item 5: scores are count/n*100 in float64, so differences equal in exact arithmetic (the same number of
# examples lost on each seed) can differ in their last bits. They are constant, exactly like bit-identical ones.

ISSUE_A = [282 / 408 * 100, 281 / 408 * 100, 282 / 408 * 100]  # MRPC: every seed loses exactly 25 of 408 examples
ISSUE_B = [307 / 408 * 100, 306 / 408 * 100, 307 / 408 * 100]
DEV_SIZES = (71, 277, 408, 872, 1043, 5463, 9815, 40430)  # WNLI, RTE, MRPC, SST-2, CoLA, QNLI, MNLI-m, QQP


def test_issue_example_differences_are_not_bit_identical():
    d = stats.paired_differences(ISSUE_A, ISSUE_B)
    assert np.ptp(d) > 0  # the premise: only rounding separates them
    assert np.ptp(d) < 1e-13


def test_t_test_on_differences_equal_up_to_rounding_is_undefined():
    res = stats.paired_t_test(ISSUE_A, ISSUE_B)  # was t = -1.3e15, p = 6e-31
    assert math.isnan(res["statistic"]) and math.isnan(res["p"])
    assert "constant" in res["note"] and "undefined" in res["note"]
    bit_identical = stats.paired_t_test([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])  # the case that was already undefined
    assert res["note"] == bit_identical["note"] and res["df"] == bit_identical["df"] == 2


def test_compare_on_the_issue_example_equals_the_bit_identical_case():
    rounded = stats.compare(ISSUE_A, ISSUE_B, n_boot=200)
    d = -25 / 408 * 100
    exact = stats.compare([d, d, d], [0.0, 0.0, 0.0], n_boot=200)  # bit-identical differences
    assert math.isnan(rounded.p_t) and math.isnan(rounded.t_stat)
    assert rounded.sd_diff == 0.0 == exact.sd_diff
    assert rounded.notes == exact.notes == "differences are constant (SD 0): t-test undefined"
    assert rounded.p_exact == exact.p_exact == 0.25
    assert rounded.p_wilcoxon == exact.p_wilcoxon and rounded.wilcoxon_stat == exact.wilcoxon_stat
    assert rounded.mean_diff == pytest.approx(d, abs=1e-12)


@pytest.mark.parametrize("n_dev", DEV_SIZES)
def test_t_test_undefined_whenever_each_seed_loses_the_same_count(n_dev):
    # the whole kind: any dev size, any scores, the score computed along different float paths
    rng = np.random.default_rng(n_dev)
    ways = (lambda c: c / n_dev * 100, lambda c: 100 * (c / n_dev), lambda c: c * 100 / n_dev,
            lambda c: float(np.mean(np.arange(n_dev) < c)) * 100)
    for _ in range(20):
        lost = int(rng.integers(1, n_dev // 4))
        counts = rng.integers(lost, n_dev + 1, size=int(rng.integers(2, 11)))
        a = [ways[rng.integers(4)](int(c - lost)) for c in counts]
        b = [ways[rng.integers(4)](int(c)) for c in counts]
        res = stats.paired_t_test(a, b)
        assert math.isnan(res["p"]) and "constant" in res["note"], (a, b)
        assert stats.compare(a, b, n_boot=10).sd_diff == 0.0


def test_wilcoxon_ranks_differences_equal_up_to_rounding_as_ties():
    x1 = 25 / 408 * 100  # 25 examples of 408, computed two ways
    x2 = 307 / 408 * 100 - 282 / 408 * 100
    y = 50 / 408 * 100
    assert x1 != x2
    d = [x1, -x2, y, y, 2 * y]
    # exact arithmetic: |d| = x, x, y, y, 2y -> ranks 1.5, 1.5, 3.5, 3.5, 5; W- = 1.5 (the one negative, tied)
    ranks = sps.rankdata([1, 1, 2, 2, 4])
    assert ranks[1] == 1.5
    res = stats.wilcoxon_test(d)  # was 2.0: rounding broke the tie, -x2 ranked 2
    assert res["statistic"] == 1.5
    assert res == stats.wilcoxon_test([x1, -x1, y, y, 2 * y])


def test_wilcoxon_ties_on_the_shipped_rte_voita_vs_auber_seeds():
    # results/quick, RTE voita fraction:0.3 vs auber: the seeds differ by -7, +7, +3 of 277 examples
    a = [100 * (c / 277) for c in (145, 146, 151)]  # as the report computes them: 100 * accuracy
    b = [100 * (c / 277) for c in (152, 139, 148)]
    d = stats.paired_differences(a, b)
    assert abs(d[0]) != abs(d[1])  # the tie that rounding broke
    # exact arithmetic: |d| = 7, 7, 3 -> ranks 2.5, 2.5, 1; W+ = 3.5, W- = 2.5; statistic min = 2.5 (was 3.0)
    res = stats.compare(a, b, n_boot=10)
    assert res.wilcoxon_stat == 2.5
    assert res.wilcoxon_stat == stats.wilcoxon_test([-7.0, 7.0, 3.0])["statistic"]


def test_wilcoxon_drops_differences_that_are_zero_up_to_rounding():
    a = [100 * 282 / 408, 283 / 408 * 100, 284 / 408 * 100]  # 100*282/408 and 282/408*100 differ in the last bit
    b = [282 / 408 * 100] * 3
    d = stats.paired_differences(a, b)
    assert d[0] != 0  # 0 in exact arithmetic, not in float
    res = stats.compare(a, b, n_boot=10)
    want = stats.wilcoxon_test([0.0, 100 / 408, 200 / 408])
    assert "1 zero difference(s) dropped" in want["note"]
    assert (res.wilcoxon_stat, res.p_wilcoxon) == (want["statistic"], want["p"])
    assert stats.wilcoxon_test(d, scale=100)["note"] == want["note"]


def test_differences_all_zero_up_to_rounding_are_zero_for_every_test():
    a = [100 * 282 / 408, 282 / 408 * 100, 100 * 282 / 408]  # the same score computed along two float paths
    b = [282 / 408 * 100, 282 / 408 * 100, 282 / 408 * 100]
    d = stats.paired_differences(a, b)
    assert np.count_nonzero(d) == 2 and np.max(np.abs(d)) < 1e-13
    res = stats.compare(a, b, n_boot=10)
    assert math.isnan(res.p_wilcoxon) and math.isnan(res.p_t) and res.p_exact == 1.0
    assert res.sd_diff == 0.0
    assert res.notes == stats.compare([0.8, 0.8, 0.8], [0.8, 0.8, 0.8], n_boot=10).notes
    assert "all differences are zero" in stats.wilcoxon_test(d, scale=100)["note"]
    assert stats.sign_flip_test(d, scale=100)["p"] == 1.0
    tiny = [1e-15, 0.0, -1e-15, 2e-15]  # scores of magnitude ~1 that agree up to rounding
    assert math.isnan(stats.wilcoxon_test(tiny, scale=1.0)["p"])
    assert stats.sign_flip_test(tiny, scale=1.0)["p"] == 1.0
    assert stats.sign_flip_test(np.full(17, 1e-15), n_mc=1000, scale=1.0)["p"] == 1.0  # Monte Carlo branch too


def test_sign_flip_keeps_the_exact_p_of_constant_differences_up_to_rounding():
    d = stats.paired_differences(ISSUE_A, ISSUE_B)
    res = stats.sign_flip_test(d)
    assert res["p"] == 0.25 == stats.min_exact_p(3)  # only the observed pattern and its mirror reach |mean|
    assert res["statistic"] == pytest.approx(-25 / 408 * 100, abs=1e-12)
    x1, x2 = 25 / 408 * 100, 307 / 408 * 100 - 282 / 408 * 100
    ten = [x1, x2] * 5
    assert stats.sign_flip_test(ten, scale=100)["p"] == stats.min_exact_p(10)
    # ties between patterns that only rounding separates still count: +x1 -x2 +y has |mean| = |y|/3 exactly
    y = 1 / 408 * 100
    assert stats.sign_flip_test([x1, -x2, y], scale=100)["p"] == pytest.approx(exact_p_by_definition([25, -25, 1]))


@pytest.mark.parametrize("n_dev", DEV_SIZES)
def test_real_differences_of_one_example_are_not_rounding(n_dev):
    step = 100 / n_dev  # the smallest real change of an accuracy in percent points
    a = [(n_dev // 2) / n_dev * 100, (n_dev // 2 + 1) / n_dev * 100, (n_dev // 2) / n_dev * 100]
    b = [(n_dev // 3) / n_dev * 100] * 3
    d = stats.paired_differences(a, b)
    snapped = stats.snap_differences(d, scale=100)
    assert len(set(snapped.tolist())) == 2
    res = stats.paired_t_test(a, b)
    ref = sps.ttest_rel(a, b)
    assert res["note"] == ""
    assert res["statistic"] == pytest.approx(ref.statistic) and res["p"] == pytest.approx(ref.pvalue)
    assert stats.compare(a, b, n_boot=10).sd_diff == pytest.approx(np.std(d, ddof=1))
    assert stats.rounding_tolerance(100) < 1e-6 * step
    # Wilcoxon: two different magnitudes are not tied, a one-example difference is not a zero
    w = stats.wilcoxon_test([step, 2 * step, -3 * step], scale=100)
    assert w["note"] == "" and w["statistic"] == 3.0


def test_snap_differences_rule():
    x1, x2 = 25 / 408 * 100, 307 / 408 * 100 - 282 / 408 * 100
    out = stats.snap_differences([x2, -x1, 1.4e-14, -1e-15, 0.5, 0.75], scale=100)
    assert out[0] == -out[1] and out[2] == 0 and out[3] == 0 and out[4] == 0.5 and out[5] == 0.75
    assert np.all(np.abs(out - [x2, -x1, 1.4e-14, -1e-15, 0.5, 0.75]) <= stats.rounding_tolerance(100))
    assert stats.rounding_tolerance(100) == stats.ROUNDING_ULPS * np.finfo(float).eps * 100
    assert stats.snap_differences([]).size == 0
    # without a scale, the differences' own magnitude sets it
    out = stats.snap_differences([6.0, 6.0 + 1e-14, -6.0 + 1e-14])
    assert out[0] == out[1] == -out[2] and abs(out[0] - 6.0) < 1e-13
