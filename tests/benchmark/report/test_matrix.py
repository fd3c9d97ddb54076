"""The selection x repair matrix of a report (issue 62): repair conditions get their own tables and families (no
prune-only or prune+recover p moves when they join a folder), the matrix's means, differences and tests are
recomputed here from the records, and the heatmap is drawn."""
from __future__ import annotations

import numpy as np
import pytest

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report import analyse, load_runs
from headprune_bench.benchmark.report.curves import curve_frames
from headprune_bench.benchmark.report.matrix import (
    heatmap,
    matrix_frame,
    matrix_frames,
    matrix_section,
    score_tests,
)
from tests.synthetic_runs import make_records, write_run

SEEDS = tuple(range(6))
LEVELS = ["fraction:0.25", "fraction:0.5"]
METHODS = {"original": ["none"], "random": LEVELS, "michel": LEVELS}
REPAIRS = ("prune+bias", "prune+scales")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    records = make_records(tasks=("rte",), seeds=SEEDS, methods=METHODS,
                           conditions=("prune-only", "prune+recover", *REPAIRS))
    base = tmp_path_factory.mktemp("matrix")
    without = [r for r in records if r["condition"] not in REPAIRS]
    return write_run(base / "without", without), write_run(base / "with", records)


def _p(folder):
    return {(r.group, c.target.label, c.reference.label): (c.family, c.all.p_holm)
            for r in analyse(load_runs([folder]), n_boot=100, n_boot_examples=20)
            for c in (*r.comparisons, *r.pairwise) if c.tested}


def test_repair_rows_have_their_own_families_and_move_no_other_p(folders):
    without, with_repairs = _p(folders[0]), _p(folders[1])
    for key, value in without.items():
        assert with_repairs[key] == value
    added = {v[0] for k, v in with_repairs.items() if k not in without}
    assert added == {f"rte/{c}/{lv}/{kind}" for c in REPAIRS for lv in ("fraction:0.25", "fraction:0.5")
                     for kind in ("primary", "pairwise")}


def test_the_matrix_means_and_tests_are_the_records(folders):
    data = load_runs([folders[1]])
    frame = data.frame
    m = matrix_frame(frame, n_boot=200)
    assert set(m.repair) == {"none", "bias", "scales", "finetune"} and set(m.selector) == {"random", "michel"}
    original = {int(s): 100 * v for s, v in zip(*[frame[(frame.method == "original") & (frame.condition ==
                                                                                          "prune-only")][c]
                                                  for c in ("seed", "score")])}
    cell = frame[(frame.method == "michel") & (frame.condition == "prune+bias") & (frame.budget == "fraction:0.5")]
    row = m[(m.selector == "michel") & (m.repair == "bias") & (m.level == "fraction:0.5")].iloc[0]
    assert row.n == len(SEEDS) and row["mean"] == pytest.approx(100 * cell.score.mean(), abs=1e-12)
    assert row.delta == pytest.approx(np.mean([100 * v - original[int(s)] for s, v in zip(cell.seed, cell.score)]),
                                      abs=1e-12)
    tests = [t for t in score_tests(frame, n_boot=200) if t["level"] == "fraction:0.5"]
    assert {(t["selector"], t["repair"]) for t in tests} == {(s, r) for s in ("michel", "random")
                                                             for r in ("bias", "scales")}
    assert {t["family"] for t in tests} == {"rte/matrix/fraction:0.5/repair-vs-none"}
    none = frame[(frame.method == "michel") & (frame.condition == "prune-only") & (frame.budget == "fraction:0.5")]
    a = 100 * cell.sort_values("seed").score.to_numpy()
    b = 100 * none.sort_values("seed").score.to_numpy()
    t = next(t for t in tests if (t["selector"], t["repair"]) == ("michel", "bias"))
    assert t["p_exact"] == stats.compare(a, b, n_boot=200).p_exact and t["mean"] == pytest.approx((a - b).mean())
    adjusted, _ = stats.holm([x["p_exact"] for x in tests])
    assert [x["p_holm"] for x in tests] == list(adjusted)


def test_the_area_tests_heatmap_and_section(folders, tmp_path):
    data = load_runs([folders[1]])
    curves = curve_frames(data, n_boot=200)
    mf = matrix_frames(data, curves.auc, n_boot=200)
    assert set(mf.area.repair) == {"none", "bias", "scales"}  # finetune's areas are against the control: not here
    best = mf.tests[mf.tests.family == "rte/matrix/area/best-vs-runner-up"]
    assert len(best) == 1
    top = mf.area.sort_values("mean", ascending=False).iloc[0]
    assert (best.selector.iloc[0], best.repair.iloc[0]) == (top.selector, top.repair)
    assert len(mf.tests[mf.tests.family == "rte/matrix/area/repair-vs-none"]) == 4
    paths = heatmap("rte", mf.area, mf.tests.to_dict("records"), tmp_path)
    assert sorted(p.name for p in paths) == ["matrix_rte.pdf", "matrix_rte.png"]
    assert all(p.stat().st_size for p in paths)
    text = "\n".join(matrix_section(mf, paths))
    assert "**RTE fraction:0.5: mean score (Δ vs original)**" in text and "Best by area:" in text
    assert len(mf.spread) == 2 and all("across selectors under one repair" in line for line in mf.spread)


def test_each_repair_gets_a_curve_panel_against_the_original(folders, tmp_path):
    from headprune_bench.benchmark.report.curve_plots import plot_curves, repair_panels

    data = load_runs([folders[1]])
    curves = curve_frames(data, n_boot=200).curves
    rows = curves[curves.task == "rte"]
    assert repair_panels(rows) == list(REPAIRS)
    assert set(rows[rows.condition == "prune+bias"].method) == {"random", "michel"}  # (the original: prune-only)
    paths = plot_curves(curves, "rte", tmp_path, {}, {})
    assert sorted(p.name for p in paths) == ["curve_rte.pdf", "curve_rte.png"]
