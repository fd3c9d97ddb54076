"""Tests of headprune_bench.benchmark.report.curves (and the per-level Holm families of a sweep in analysis) on
synthetic run folders: areas recomputed by hand from the records, exact and Holm p, exclusions, the atlas, the CSVs."""
from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests
from synthetic_runs import HEADS, LAYERS, make_records, write_run

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report import analyse, build_report, load_runs
from headprune_bench.benchmark.report.curves import (
    AGREEMENT_COLUMNS,
    AUC_COLUMNS,
    CURVES_COLUMNS,
    STABILITY_COLUMNS,
    curve_frames,
    has_sweep,
)
from headprune_bench.benchmark.stats.curves import expected_mean_pairwise_jaccard, normalised_area

LEVELS = ["fraction:0.25", "fraction:0.5", "fraction:0.75"]
METHODS = {"original": ["none"], "random": LEVELS, "confidence": LEVELS, "michel": LEVELS, "auber": ["own"]}
REFERENCE = {"prune-only": ("original", "prune-only"), "prune+recover": ("original", "control")}


def sweep_records(**kwargs):
    return make_records(methods=METHODS, conditions=("prune-only", "prune+recover"), seeds=range(6), **kwargs)


def frames_of(tmp_path, records, name="run"):
    return curve_frames(load_runs([write_run(tmp_path / name, records)]), n_boot=300)


def score(records, task, seed, method, budget, condition):
    (r,) = [r for r in records if (r["task"], r["seed"], r["method"], r["budget"]["spec"], r["condition"])
            == (task, seed, method, budget, condition)]
    return r["score"]


def raw_areas_by_hand(records, task, method, condition, seeds=range(6)):
    ref_method, ref_condition = REFERENCE[condition]
    return {s: normalised_area([0.25, 0.5, 0.75], [score(records, task, s, method, b, condition) for b in LEVELS],
                               score(records, task, s, ref_method, "none", ref_condition)) for s in seeds}


def majority(records, task, seed):
    (r,) = [r for r in records if (r["task"], r["seed"], r["method"], r["condition"])
            == (task, seed, "original", "prune-only")]
    return r["majority_baseline"][r["primary_metric"]]


def areas_by_hand(records, task, method, condition, seeds=range(6)):
    """The areas above chance, written out: clip each point at the majority, trapezoids over f = 0, .25, .5, .75,
    divided by the range .75 and by the reference's margin averaged over the seeds."""
    ref_method, ref_condition = REFERENCE[condition]
    s0 = {s: score(records, task, s, ref_method, "none", ref_condition) for s in seeds}
    margin = np.mean([max(s0[s] - majority(records, task, s), 0.0) for s in seeds])
    out = {}
    for s in seeds:
        m = majority(records, task, s)
        y = [max(v - m, 0.0) for v in [s0[s], *(score(records, task, s, method, b, condition) for b in LEVELS)]]
        area = sum(0.25 * (y[i] + y[i + 1]) / 2 for i in range(3))
        out[s] = area / 0.75 / margin
    return out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    records = sweep_records()
    return records, frames_of(tmp_path_factory.mktemp("sweep"), records)


def test_area_rows_are_the_normalised_areas_of_the_records(sweep):
    records, cf = sweep
    methods = cf.auc[cf.auc.kind == "method"]
    assert len(methods) == 2 * 2 * 3  # tasks x conditions x curve methods (auber is a point, not a curve)
    for row in methods.itertuples():
        areas = list(areas_by_hand(records, row.task, row.method, row.condition).values())
        assert row.n == 6 and row.levels == ";".join(LEVELS)
        assert row.mean == pytest.approx(np.mean(areas)) and row.sd == pytest.approx(np.std(areas, ddof=1))
        assert (row.ci_low, row.ci_high) == pytest.approx(stats.mean_ci_t(areas))
        raw = list(raw_areas_by_hand(records, row.task, row.method, row.condition).values())
        assert row.area_mean == pytest.approx(np.mean(raw)) and row.area_sd == pytest.approx(np.std(raw, ddof=1))


def test_pair_p_is_the_sign_flip_p_of_the_area_differences_with_holm_over_the_pairs(sweep):
    records, cf = sweep
    for (task, condition), g in cf.auc[cf.auc.kind == "pair"].groupby(["task", "condition"]):
        assert len(g) == 3  # 3 curve methods, every pair once
        for row in g.itertuples():
            a = areas_by_hand(records, task, row.method, condition)
            b = areas_by_hand(records, task, row.vs, condition)
            d = [a[s] - b[s] for s in range(6)]
            assert row.mean == pytest.approx(np.mean(d)) and row.p_exact == pytest.approx(stats.sign_flip_test(d)["p"])
            assert row.min_p == pytest.approx(2 / 2**6) and row.ci_low <= row.mean <= row.ci_high
        np.testing.assert_allclose(g.p_holm, multipletests(g.p_exact, method="holm")[1])


def test_a_method_missing_a_level_on_a_seed_is_excluded_with_why(tmp_path, sweep):
    gone = ("mrpc", "michel", 3, "fraction:0.5", "prune-only")
    records = [r for r in sweep[0]
               if (r["task"], r["method"], r["seed"], r["budget"]["spec"], r["condition"]) != gone]
    assert len(records) == len(sweep[0]) - 1
    cf = frames_of(tmp_path, records)
    auc = cf.auc[(cf.auc.task == "mrpc") & (cf.auc.condition == "prune-only")]
    (excluded,) = auc[auc.kind == "excluded"].itertuples()
    assert excluded.method == "michel" and "fraction:0.5 on seed(s) 3" in excluded.note
    assert "michel" not in set(auc[auc.kind != "excluded"].method) | set(auc.vs)
    pair = auc[auc.kind == "pair"]
    assert len(pair) == 1 and pair.p_holm.iloc[0] == pytest.approx(pair.p_exact.iloc[0])  # a family of one
    recover = cf.auc[(cf.auc.task == "mrpc") & (cf.auc.condition == "prune+recover")]
    assert "michel" in set(recover[recover.kind == "method"].method)


def test_curve_rows_levels_scores_and_base_failures(tmp_path):
    records = sweep_records(degenerate={("cola", 2, "original")})
    cf = frames_of(tmp_path, records)
    assert list(cf.curves.columns) == CURVES_COLUMNS and cf.base_failed == {"cola": [2]}
    row = cf.curves[(cf.curves.task == "cola") & (cf.curves.method == "michel") & (cf.curves.budget == "fraction:0.5")
                    & (cf.curves.condition == "prune+recover")].iloc[0]
    kept = [s for s in range(6) if s != 2]
    scores = [score(records, "cola", s, "michel", "fraction:0.5", "prune+recover") for s in kept]
    assert row.n == 5 and row.kind == "curve" and row.level == pytest.approx(0.5) and row.level_sd == 0
    assert row["mean"] == pytest.approx(np.mean(scores)) and (row.ci_low, row.ci_high) == pytest.approx(
        stats.mean_ci_t(scores))
    kinds = cf.curves[cf.curves.task == "mrpc"].groupby("method").kind.first().to_dict()
    assert kinds == {"original": "reference", "control": "reference", "auber": "point", "random": "curve",
                     "michel": "curve", "confidence": "curve"}
    assert set(cf.curves.condition) == {"prune-only", "prune+recover", "control"}
    auber = cf.curves[(cf.curves.method == "auber") & (cf.curves.task == "mrpc")].iloc[0]
    assert auber.level == pytest.approx(3 / (LAYERS * HEADS))
    cola = cf.auc[(cf.auc.task == "cola") & (cf.auc.kind == "method")]
    assert set(cola.n) == {5}


def test_atlas_identical_masks_give_jaccard_one_and_random_is_the_exact_expectation(tmp_path, sweep):
    records = copy.deepcopy(sweep[0])
    mask = [[0, 0, 1, 1], [1, 1, 1, 1]]
    for r in records:  # random and michel prune the same two heads at 25% on every mrpc seed
        if r["task"] == "mrpc" and r["budget"]["spec"] == "fraction:0.25" and r["method"] in ("random", "michel"):
            r["mask"] = mask
    cf = frames_of(tmp_path, records)
    st = cf.stability.set_index(["task", "method", "budget"])
    assert st.loc[("mrpc", "random", "fraction:0.25"), "jaccard"] == 1.0
    assert st.loc[("mrpc", "random", "fraction:0.25"), "random_expected"] == pytest.approx(
        expected_mean_pairwise_jaccard(LAYERS * HEADS, [2] * 6))
    assert st.loc[("mrpc", "confidence", "fraction:0.25"), "jaccard"] < 1
    ag = cf.agreement.set_index(["task", "budget", "method_a", "method_b"])
    assert ag.loc[("mrpc", "fraction:0.25", "random", "michel"), "jaccard"] == 1.0
    assert ag.loc[("mrpc", "fraction:0.25", "michel", "random"), "jaccard"] == 1.0
    assert ag.loc[("mrpc", "fraction:0.25", "random", "michel"), "n"] == 6
    per_level = cf.agreement[(cf.agreement.task == "mrpc") & (cf.agreement.budget == "fraction:0.5")]
    assert len(per_level) == 6 and not (per_level.method_a == per_level.method_b).any()  # 3 x 2 ordered pairs
    assert "auber" not in set(cf.agreement.method_a) and "auber" in set(cf.stability.method)


def test_report_writes_the_curve_csvs_and_the_curves_section_first(tmp_path):
    run = write_run(tmp_path / "run", sweep_records(tasks=("mrpc",)))
    out = build_report([run], plots=False, echo=False, n_boot=300, n_boot_examples=50)
    for name, columns in (("curves.csv", CURVES_COLUMNS), ("auc.csv", AUC_COLUMNS),
                          ("atlas_stability.csv", STABILITY_COLUMNS), ("atlas_agreement.csv", AGREEMENT_COLUMNS)):
        assert list(pd.read_csv(out / name).columns) == columns, name
    md = (out / "report.md").read_text()
    assert md.index("## Curves") < md.index("## MRPC (acc) —") and "A = (1/f_K)" in md
    assert "### Curves, MRPC (acc), prune+recover" in md and "smallest exact p" in md and "Agreement at 50%" in md


def test_a_folder_without_a_sweep_has_no_curves(tmp_path):
    records = make_records(methods={"original": ["none"], "random": ["fraction:0.5"], "auber": ["own"]})
    run = write_run(tmp_path / "run", records)
    data = load_runs([run])
    cf = curve_frames(data)
    assert not has_sweep(data) and cf.curves.empty and list(cf.auc.columns) == AUC_COLUMNS
    out = build_report([run], plots=False, echo=False, n_boot=200, n_boot_examples=50)
    assert not (out / "curves.csv").exists() and "## Curves" not in (out / "report.md").read_text()


# --------------------------------------------------------------------------- per-level Holm in the analysis


def test_holm_runs_within_each_budget_level_of_a_sweep(tmp_path):
    """In a sweep, each level's "vs" and pairwise tests are one Holm family, so a level's Holm p do not change
    when another level is added."""
    records = sweep_records(tasks=("rte",))
    full = analyse(load_runs([write_run(tmp_path / "all", records)]), n_boot=100, n_boot_examples=20)
    fewer = [r for r in records if r["budget"]["spec"] != "fraction:0.75"]
    part = analyse(load_runs([write_run(tmp_path / "part", fewer)]), n_boot=100, n_boot_examples=20)
    checked = 0
    for r in full:
        for family in (r.comparisons, r.pairwise):
            tested = [c for c in family if c.tested and c.in_family]
            assert set(LEVELS) <= {c.level for c in tested}
            assert all(c.family.split("/")[2] == c.level for c in tested)
            for family_id in {c.family for c in tested}:
                at = [c for c in tested if c.family == family_id]
                np.testing.assert_allclose([c.all.p_holm for c in at],
                                           multipletests([c.all.stats.p_exact for c in at], method="holm")[1])
                checked += len(at) > 1
    assert checked >= 4
    key = {(r.task, r.group, c.target.label, c.reference.label): c.all.p_holm for r in part
           for c in (*r.comparisons, *r.pairwise) if c.tested}
    same = [(key[(r.task, r.group, c.target.label, c.reference.label)], c.all.p_holm) for r in full
            for c in (*r.comparisons, *r.pairwise) if c.tested and c.level in LEVELS[:2]]
    assert len(same) > 5 and all(a == pytest.approx(b) for a, b in same)
