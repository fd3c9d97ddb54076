"""Tests of headprune_bench.benchmark.report on synthetic run folders (records shaped like the runner's).

One report with plots is built once per module (the slow part, a few seconds); the other tests run without plots.
"""
from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from statsmodels.stats.multitest import multipletests
from synthetic_runs import HEADS, LAYERS, make_records, write_run

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.cli import report_cmd
from headprune_bench.benchmark.report import ReportWarning, analyse, build_report, cells, load_runs
from headprune_bench.benchmark.report.tables import num as tables_num
from headprune_bench.benchmark.tasks import TASKS


def section(md: str, task: str) -> str:
    """The Markdown of one task's main table (from its heading to the next heading)."""
    start = md.index(f"## {TASKS[task].glue_dir} (")
    end = md.index("\n## ", start + 3)
    return md[start:end]


def row(md_section: str, method: str, budget: str) -> str:
    hits = [l for l in md_section.splitlines() if l.startswith(f"| {method} ") and f"| {budget} " in l]
    assert hits, f"no row {method} {budget}"
    return hits[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    records = make_records(degenerate={("cola", 1, "random")})
    run = write_run(tmp_path_factory.mktemp("run"), records)
    out = build_report([run], plots=True, echo=False, n_boot=2000, n_boot_examples=300)
    return records, run, out


def test_report_writes_markdown_csv_latex_and_plots(built):
    _, run, out = built
    assert out == run / "report"
    for name in ("report.md", "scores.csv", "comparisons.csv", "summary.csv", "cost.csv", "missing.csv", "tables.tex"):
        assert (out / name).stat().st_size > 0, name
    plots = out / "plots"
    for stem in ("scores_mrpc", "scores_cola", "masks_mrpc", "masks_cola", "sweep_mrpc", "sweep_cola",
                 "auber_layers_mrpc", "cost_vs_score"):
        for ext in ("png", "pdf"):
            path = plots / f"{stem}.{ext}"
            assert path.stat().st_size > 1000, path
    assert (plots / "scores_mrpc.png").read_bytes()[:4] == b"\x89PNG"
    assert (plots / "scores_mrpc.pdf").read_bytes()[:4] == b"%PDF"
    tex = (out / "tables.tex").read_text()
    assert all(rule in tex for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"$\pm$", r"\begin{table}"))
    md = (out / "report.md").read_text()
    assert "![scores_mrpc](plots/scores_mrpc.png)" in md


def test_wall_seconds_per_task_and_seed_are_the_records_own(built):
    records, _, out = built
    walls = pd.read_csv(out / "wall_per_seed.csv", index_col="method")
    checked = 0
    for r in records:
        if r["condition"] != "prune-only" or r["method"] == "original":
            continue
        label = f"{r['method']} [{r['budget']['spec']}]"
        assert walls.loc[label, f"{r['task']}/s{r['seed']}"] == pytest.approx(r["cost"]["wall_s"])
        checked += 1
    assert checked > 10
    assert list(walls.columns)[:2] == ["mrpc/s0", "mrpc/s1"]
    assert "## Wall seconds per (task, seed)" in (out / "report.md").read_text()
    assert "base fine-tune" not in walls.index  # this folder has no base/: no row of NaNs
    for column in walls.columns:  # the last row sums every record of its (task, seed)
        task, seed = column.split("/s")
        own = [r["cost"]["wall_s"] for r in records if r["task"] == task and r["seed"] == int(seed)]
        assert walls.loc["total", column] == pytest.approx(sum(own), abs=5e-4)  # (rounded to ms)


def test_wall_seconds_per_seed_add_each_base_fine_tune_from_its_train_info(tmp_path):
    """The base row comes from base/<task>-seed<N>/train_info.json and counts in the total. A damaged file or a
    save in progress (``.tmp``) is left out, not raised; the total of a (task, seed) is NaN when its base time is
    unknown or one of its cells is missing (a partial seed would understate what a seed costs)."""
    records = make_records(tasks=("mrpc",), seeds=(0, 1, 2, 3), methods={"original": ["none"],
                                                                       "random": ["fraction:0.25"]})
    records = [r for r in records if not (r["seed"] == 1 and r["method"] == "random")]  # seed 1 lacks a cell
    run = write_run(tmp_path / "run", records)
    for name, text in (("mrpc-seed0", '{"wall_s": 580.5, "examples": 3668}'), ("mrpc-seed1", '{"wall_s": 600}'),
                       ("mrpc-seed2", "{not json"), ("mrpc-seed3.tmp", '{"wall_s": 9999}')):
        (run / "base" / name).mkdir(parents=True)
        (run / "base" / name / "train_info.json").write_text(text)
    walls = cells.wall_per_seed(load_runs([run]))
    assert list(walls.index[-2:]) == ["base fine-tune", "total"]
    base, total = walls.loc["base fine-tune"], walls.loc["total"]
    assert (base["mrpc/s0"], base["mrpc/s1"]) == (580.5, 600.0) and base[["mrpc/s2", "mrpc/s3"]].isna().all()
    cells_s0 = sum(r["cost"]["wall_s"] for r in records if r["seed"] == 0)
    assert total["mrpc/s0"] == pytest.approx(cells_s0 + 580.5, abs=2e-3)  # (rounded to milliseconds)
    assert total[["mrpc/s1", "mrpc/s2", "mrpc/s3"]].isna().all()


def test_cost_table_counts_the_machines_that_ran_each_row(tmp_path):
    """A wall time compares with another only on the same machine: the cost table says how many of a row's cells
    ran on each; a record written before ``cost.machine`` existed counts as unknown."""
    records = make_records(tasks=("mrpc",), seeds=(0, 1, 2), methods={"original": ["none"],
                                                                       "random": ["fraction:0.25"]})
    for r in records:
        if r["method"] == "random" and r["seed"] > 0:
            r["cost"] = dict(r["cost"], machine="AMD EPYC", threads=1)
    cost = cells.cost_frame(load_runs([write_run(tmp_path / "run", records)]))
    assert dict(zip(cost.method, cost.machine)) == {"original": "unknown x3", "random": "AMD EPYC x2, unknown x1"}
    assert cells.machine_counts(["b", "a", "", "b", "a"]) == "a x2, b x2, unknown x1"
    assert cells.machine_counts([]) == ""


def test_wall_total_leaves_out_cells_whose_option_set_a_later_run_replaced(tmp_path):
    """A method's options changed between two `bench run`s into one folder (runs.jsonl, oldest first): its cells
    were computed again under the new options hash. Both records stay in the table (two rows), but a seed's total
    counts the newest plan's cell once, so it says what a seed costs now. A record no plan lists still counts."""
    records = make_records(tasks=("mrpc",), seeds=(0, 1), methods={"original": ["none"], "random": ["fraction:0.25"]})
    old = [dict(r, cell=r["cell"].replace("opts=abc123", "opts=old999"), method_options={"v": 1},
                cost=dict(r["cost"], wall_s=1000.0 + r["seed"]))
           for r in records if r["method"] == "random"]
    run = write_run(tmp_path / "run", old + records)
    plans = [{"cells": [r["cell"] for r in old + records if r["method"] == "original"] + [r["cell"] for r in old]},
             {"cells": [r["cell"] for r in records]}]
    (run / "runs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in plans))
    # the old option set's seed-0 cell failed once, then the old set was replaced: not failed, not missing
    failure = {"cell": old[0]["cell"], "task": "mrpc", "seed": 0, "method": "random", "condition": "prune-only",
               "error": "LocalRayletDiedError: boom"}
    (run / "failures.jsonl").write_text(json.dumps(failure) + "\n")
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old[1:] + records))
    data = load_runs([run])
    assert data.superseded == {run: {r["cell"] for r in old}}  # (old[0]'s key as planned)
    assert data.superseded_records == {r["cell"] for r in old[1:]}
    assert cells.missing_frame(data).empty
    old = old[1:]
    walls = cells.wall_per_seed(data)
    for s in (0, 1):
        column = f"mrpc/s{s}"
        if s == 1:  # the old set's record keeps its row (seed 0's failed)
            assert sorted(walls[column].drop("total").dropna())[-1] == 1000.0 + s
        current = sum(r["cost"]["wall_s"] for r in records if r["seed"] == s)
        assert walls.loc["total", column] == pytest.approx(current, abs=5e-4)  # (rounded to milliseconds)
    # a third run that plans the old option set again makes it current, and the newer one superseded
    (run / "runs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in plans + [plans[0]]))
    data = load_runs([run])
    assert data.superseded_records == {r["cell"] for r in records if r["method"] == "random"}
    # ... and seed 0's old-options cell, current again, failed and has no record: listed, and its seed's total
    # is unknown, not the others' sum
    assert cells.missing_frame(data).status.tolist() == ["failed"]
    walls = cells.wall_per_seed(data)
    assert math.isnan(walls.loc["total", "mrpc/s0"]) and not math.isnan(walls.loc["total", "mrpc/s1"])
    # without the failure: the current cell has only the replaced options' record, so it is still to do
    (run / "failures.jsonl").unlink()
    data = load_runs([run])
    assert cells.missing_frame(data).status.tolist() == ["ran with other options"]
    assert math.isnan(cells.wall_per_seed(data).loc["total", "mrpc/s0"])
    # without runs.jsonl nothing says which set is current: every record counts (seed 0 is incomplete: the grid
    # rule lists the failed cell)
    (run / "runs.jsonl").unlink()
    assert load_runs([run]).superseded == {} and load_runs([run]).superseded_records == set()
    walls = cells.wall_per_seed(load_runs([run]))
    assert math.isnan(walls.loc["total", "mrpc/s0"])
    assert walls.loc["total", "mrpc/s1"] == pytest.approx(sum(r["cost"]["wall_s"] for r in old + records
                                                              if r["seed"] == 1), abs=5e-4)


def test_an_option_set_replaced_in_one_folder_is_still_current_in_another(tmp_path):
    """Which option set is current is a folder's own history: folder P replaced random's options, folder Q ran only
    the old ones (and one of its cells failed). Reported together, Q's failure stays listed and Q's old-options
    records count in Q's seeds' totals."""
    records = make_records(tasks=("mrpc",), seeds=(0, 1), methods={"original": ["none"], "random": ["fraction:0.25"]})
    old = [dict(r, cell=r["cell"].replace("opts=abc123", "opts=old999"), method_options={"v": 1})
           for r in records if r["method"] == "random"]
    p = write_run(tmp_path / "p", records)
    (p / "runs.jsonl").write_text(json.dumps({"cells": [r["cell"] for r in old]}) + "\n"
                                  + json.dumps({"cells": [r["cell"] for r in records]}) + "\n")
    q_records = [dict(r, task="rte", cell=r["cell"].replace("mrpc|", "rte|")) for r in records
                 if r["method"] == "original"]
    q_old = [dict(r, task="rte", cell=r["cell"].replace("mrpc|", "rte|")) for r in old]
    failure = {"cell": q_old[0]["cell"], "task": "rte", "seed": 0, "method": "random", "condition": "prune-only",
               "error": "RuntimeError: boom"}
    q = write_run(tmp_path / "q", q_records + q_old[1:], [failure])
    (q / "runs.jsonl").write_text(json.dumps({"cells": [r["cell"] for r in q_records + q_old]}) + "\n")
    data = load_runs([p, q])
    assert data.superseded == {p: {r["cell"] for r in old}, q: set()} and data.superseded_records == set()
    missing = cells.missing_frame(data)
    assert [(r.task, r.seed, r.status) for r in missing.itertuples()] == [("rte", 0, "failed")]
    walls = cells.wall_per_seed(data)
    assert math.isnan(walls.loc["total", "rte/s0"])
    # the same key in two folders: replaced in P, current in R (which failed it): R's failure is listed
    r = write_run(tmp_path / "r", [], [dict(failure, cell=old[0]["cell"], task="mrpc")])
    (r / "runs.jsonl").write_text(json.dumps({"cells": [old[0]["cell"]]}) + "\n")
    missing = cells.missing_frame(load_runs([p, r]))
    assert [(m.task, m.seed, m.status) for m in missing.itertuples()] == [("mrpc", 0, "failed")]
    assert walls.loc["total", "rte/s1"] == pytest.approx(sum(r["cost"]["wall_s"] for r in q_records + q_old
                                                             if r["seed"] == 1), abs=5e-4)


def test_markdown_table_has_the_right_means_and_sds(built):
    records, out = built[0], built[2]
    md = (out / "report.md").read_text()
    for task in ("mrpc", "cola"):
        sec = section(md, task)
        units = {(r["method"], r["budget"]["spec"]) for r in records if r["task"] == task}
        for method, budget in units:
            scores = [100 * r["score"] for r in records
                      if r["task"] == task and r["method"] == method and r["budget"]["spec"] == budget]
            text = f"{statistics.mean(scores):.2f} ± {statistics.stdev(scores):.2f}".replace("-", "−")
            line = row(sec, method, "—" if budget == "none" else budget)
            assert text in line, (task, method, budget, text, line)
            assert "| 3 " in line  # n seeds
        assert "MCC mean ± SD" in sec if task == "cola" else "acc mean ± SD" in sec


def test_differences_p_values_and_holm_in_the_csv(built):
    records, out = built[0], built[2]
    cf = pd.read_csv(out / "comparisons.csv")
    by = {(r["task"], r["method"], r["budget"]["spec"], r["seed"]): 100 * r["score"] for r in records}
    sel = cf[(cf.task == "mrpc") & (cf.method == "random") & (cf.budget == "fraction:0.25") & (cf.kind == "original")
             & (cf.seeds == "all")].iloc[0]
    d = [by["mrpc", "random", "fraction:0.25", s] - by["mrpc", "original", "none", s] for s in range(3)]
    assert sel.mean_diff == pytest.approx(np.mean(d))
    assert sel.sd_diff == pytest.approx(np.std(d, ddof=1))
    assert sel.p_exact == pytest.approx(stats.sign_flip_test(d)["p"])
    assert sel.p_min == pytest.approx(0.25)
    assert sel.ci_low <= sel.mean_diff <= sel.ci_high
    # vs original: 3 units (random x2, auber); vs auber: random x2 -> 5 comparisons per task. random pruned 2 and 4
    # heads, auber 3: those two pairs are no test (protocol §3), so the tests are the 3 vs original. random ran two
    # fixed levels (a sweep), so Holm runs within each budget level: one test per level here
    for task in ("mrpc", "cola"):
        fam = cf[(cf.task == task) & (cf.seeds == "all") & (cf.kind != "pair")]
        assert len(fam) == 5 and set(fam.kind) == {"original", "auber"}
        tested = fam[fam.tested]
        assert list(tested.kind) == ["original"] * 3 and fam[~fam.tested].p_holm.isna().all()
        assert set(fam[~fam.tested].count_mismatch_seeds) == {"0 1 2"}
        assert list(fam.holm_level) == list(fam.budget) and tested.budget.nunique() == 3
        for _, level in tested.groupby("holm_level"):
            np.testing.assert_allclose(level.p_holm, multipletests(level.p_exact, method="holm")[1])


def test_degenerate_runs_are_counted_kept_and_left_out_only_in_the_survivors_view(built):
    out = built[2]
    md = (out / "report.md").read_text()
    cola = md[md.index("## CoLA ("):]
    assert "CoLA, sensitivity view, survivors only" in cola
    pairs = cola[cola.index("CoLA pairwise, the same sensitivity view"):].split("\n\n")[1]  # printed, not CSV only
    assert "random" in pairs and "| 2 " in pairs  # a pair with the degenerate seed, on the 2 surviving seeds
    cf = pd.read_csv(out / "comparisons.csv")
    headline = cf[(cf.task == "cola") & (cf.method == "random") & (cf.seeds == "all") & (cf.kind == "original")]
    assert set(headline.n) == {3}  # the degenerate seed stays in the headline comparison
    clean = cf[(cf.task == "cola") & (cf.method == "random") & (cf.seeds == "survivors")]
    assert set(clean.n) == {2} and set(clean.n_excluded) == {1}
    scores = pd.read_csv(out / "scores.csv")
    rnd = scores[(scores.task == "cola") & (scores.method == "random")]
    assert set(rnd.degenerate) == {1} and set(rnd.n_survivors) == {2}
    degenerate_cell = row(section(md, "cola"), "random", "fraction:0.25").rstrip(" |").rsplit("|", 1)[1].strip()
    assert degenerate_cell == "1"


def test_smallest_reachable_p_and_too_few_seeds_are_printed(built):
    md = (built[2] / "report.md").read_text()
    assert "n = 3 seeds: smallest exact two-sided p = 0.25" in md
    assert "No comparison here can reach p < 0.05" in md


def test_cross_task_summary_leaves_wnli_out(tmp_path):
    records = make_records(tasks=("mrpc", "rte", "wnli"), seeds=(0, 1), methods={"original": ["none"],
                                                                                 "michel": ["fraction:0.5"]})
    out = build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=500,
                       n_boot_examples=100)
    summ = pd.read_csv(out / "summary.csv")
    mich = summ[summ.method == "michel"].iloc[0]
    def mean(t, m):
        return 100 * np.mean([r["score"] for r in records if r["task"] == t and r["method"] == m])

    assert mich.mean_excl_wnli == pytest.approx((mean("mrpc", "michel") + mean("rte", "michel")) / 2)
    assert mich.wnli == pytest.approx(mean("wnli", "michel"))
    assert mich.tasks == 2
    wnli_major = 100 * next(r for r in records if r["task"] == "wnli")["majority_baseline"]["accuracy"]
    assert mich.wnli_majority == pytest.approx(wnli_major)
    md = (out / "report.md").read_text()
    assert "WNLI majority" in md and "adversarial" in md
    # a row that ran on MRPC only gets no cross-task mean in the text table (it would not be comparable)
    partial = records + [dict(r, method="random", cell=r["cell"].replace("|michel|", "|random|"))
                         for r in records if r["task"] == "mrpc" and r["method"] == "michel"]
    out = build_report([write_run(tmp_path / "run2", partial)], plots=False, echo=False, n_boot=300,
                       n_boot_examples=50)
    line = next(l for l in (out / "report.md").read_text().split("## Cross-task summary")[1].splitlines()
                if l.startswith("| random "))
    assert "| 1/2 " in line and "| —  " in line.split("| 1/2 ")[1][:20], line
    assert pd.read_csv(out / "summary.csv").query("method == 'random'").iloc[0].tasks == 1


def test_a_method_with_two_option_sets_is_two_labelled_configurations(tmp_path):
    records = make_records(tasks=("mrpc",), seeds=(0, 1), methods={"original": ["none"],
                                                                     "michel": ["fraction:0.3", "fraction:0.5"]})
    for r in records:
        if r["method"] == "michel":  # fraction:0.3 ran with one option set, fraction:0.5 with another
            lr = 0.1 if r["budget"]["spec"] == "fraction:0.3" else 0.4
            r["method_options"] = {"mode": "one-shot", "lr": lr}
            r["cell"] = r["cell"].replace("opts=abc123", f"opts={'aaa111' if lr == 0.1 else 'bbb222'}")
    out = build_report([write_run(tmp_path / "run", records)], plots=True, echo=False, n_boot=200,
                       n_boot_examples=50)
    md = (out / "report.md").read_text()
    table = section(md, "mrpc")
    # two configurations at one budget each are no sweep: no score-vs-heads line joins them
    assert (out / "plots" / "scores_mrpc.png").exists() and not (out / "plots" / "sweep_mrpc.png").exists()
    # labelled at both budgets, although each budget alone has a single option set
    assert "opts=aaa111" in row(table, "michel", "fraction:0.3")
    assert "opts=bbb222" in row(table, "michel", "fraction:0.5")
    sets = pd.read_csv(out / "option_sets.csv")
    assert sets.to_dict("records") == [{"method": "michel", "opts": "aaa111", "records": 2, "differs": "lr=0.1"},
                                       {"method": "michel", "opts": "bbb222", "records": 2, "differs": "lr=0.4"}]
    assert "## Option sets" in md
    # one option set per method: no labels, no section
    plain = build_report([write_run(tmp_path / "plain", make_records(tasks=("mrpc",), seeds=(0, 1)))], plots=False,
                         echo=False, n_boot=200, n_boot_examples=50)
    assert "## Option sets" not in (plain / "report.md").read_text() and not (plain / "option_sets.csv").exists()


def test_partial_run_reports_missing_and_failed_cells(tmp_path):
    records = make_records(methods={"original": ["none"], "michel": ["fraction:0.5"], "random": ["fraction:0.5"]})
    keep = [r for r in records if not (r["task"] == "cola" and r["seed"] == 2 and r["method"] in ("michel", "random"))]
    failure = {"cell": "cola|seed=2|michel|fraction:0.5|prune-only|opts=abc123", "task": "cola", "seed": 2,
               "method": "michel", "condition": "prune-only", "error": "RuntimeError: boom"}
    retried = {"cell": keep[0]["cell"], "task": keep[0]["task"], "seed": keep[0]["seed"],
               "method": keep[0]["method"], "condition": "prune-only", "error": "succeeded on a retry"}
    out = build_report([write_run(tmp_path / "run", keep, [failure, retried])], plots=False, echo=False,
                       n_boot=500, n_boot_examples=100)
    missing = pd.read_csv(out / "missing.csv")
    assert len(missing) == 2
    got = {(r.task, r.seed, r.method, r.status) for r in missing.itertuples()}
    assert got == {("cola", 2, "michel", "failed"), ("cola", 2, "random", "missing")}
    md = (out / "report.md").read_text()
    assert "1 missing and 1 failed cell(s)" in md and "RuntimeError: boom" in md
    assert "succeeded on a retry" not in md
    assert "| 2 " in row(section(md, "cola"), "michel", "fraction:0.5")  # reports what is there


def test_missing_cells_come_from_the_planned_cells_not_a_grid(tmp_path):
    """A folder holding a sweep on one task only: cells no command asked for are not 'missing'."""
    records = make_records(methods={"original": ["none"], "michel": ["fraction:0.5"], "random": ["fraction:0.25"]})
    # the fraction:0.25 sweep ran on MRPC only, and its seed-2 cell never finished
    keep = [r for r in records if not (r["method"] == "random" and (r["task"] == "cola" or r["seed"] == 2))]
    run = write_run(tmp_path / "run", keep)
    plans = [{"cells": [r["cell"] for r in records if r["method"] != "random"]},
             {"cells": [r["cell"] for r in records if r["method"] in ("original", "random") and r["task"] == "mrpc"]}]
    (run / "runs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in plans))
    out = build_report([run], plots=False, echo=False, n_boot=300, n_boot_examples=50)
    missing = pd.read_csv(out / "missing.csv")
    assert [(r.task, r.seed, r.method, r.budget, r.status) for r in missing.itertuples()] == \
        [("mrpc", 2, "random", "fraction:0.25", "missing")]
    assert "relative to the cells the folder's `bench run` commands planned" in (out / "report.md").read_text()
    # a plan made with other method options, whose cells then ran under the new options: not plainly missing
    old = [r["cell"].replace("opts=abc123", "opts=old999") for r in keep if r["method"] == "michel"][:2]
    with (run / "runs.jsonl").open("a") as fh:
        fh.write(json.dumps({"cells": old}) + "\n")
    out = build_report([run], plots=False, echo=False, n_boot=300, n_boot_examples=50)
    statuses = pd.read_csv(out / "missing.csv").status.tolist()
    assert statuses.count("ran with other options") == 2 and statuses.count("missing") == 1
    assert "1 missing and 0 failed" in (out / "report.md").read_text()
    # without runs.jsonl (an older folder) the grid rule would also list the CoLA sweep cells
    (run / "runs.jsonl").unlink()
    out = build_report([run], plots=False, echo=False, n_boot=300, n_boot_examples=50)
    assert len(pd.read_csv(out / "missing.csv")) == 4


def test_a_folder_that_is_not_a_run_folder_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        build_report([tmp_path], plots=False, echo=False)


def test_combining_folders_and_duplicate_cells_warn(tmp_path):
    records = make_records(seeds=(0, 1, 2, 3), methods={"original": ["none"], "michel": ["fraction:0.5"]})
    first = [r for r in records if r["seed"] < 2 or r["method"] == "original"]  # originals in both folders
    second = [r for r in records if r["seed"] >= 2]
    a, b = write_run(tmp_path / "a", first), write_run(tmp_path / "b", second)
    with pytest.warns(ReportWarning, match="4 duplicate cell"):
        data = load_runs([a, b])
    assert len(data.records) == len(records)
    with pytest.warns(ReportWarning, match="duplicate"):
        out = build_report([a, b], plots=False, echo=False, n_boot=500, n_boot_examples=100)
    assert out == a / "report"
    scores = pd.read_csv(out / "scores.csv")
    assert set(scores.n) == {4}
    assert "4 duplicate cell(s) ignored" in (out / "report.md").read_text()


def test_against_all_compares_every_pair(tmp_path):
    records = make_records(tasks=("rte",), methods={"original": ["none"], "michel": ["fraction:0.5"],
                                                    "random": ["fraction:0.5"], "auber": ["matched:auber"]})
    out = build_report([write_run(tmp_path / "run", records)], against="all", plots=False, echo=False,
                       formats="csv", n_boot=500, n_boot_examples=100)
    cf = pd.read_csv(out / "comparisons.csv")
    allc = cf[cf.seeds == "all"]
    assert len(allc) == 6  # 4 rows -> 4*3/2 pairs
    # named references stay references: 3 vs original, 2 vs auber (random, michel), 1 plain pair (random - michel)
    assert allc.kind.value_counts().to_dict() == {"original": 3, "auber": 2, "pair": 1}
    for _, fam in allc.groupby("family"):  # Holm within each declared family (level, kind)
        np.testing.assert_allclose(fam.p_holm, multipletests(fam.p_exact, method="holm")[1])
    assert set(allc[allc.kind == "pair"].family) == {"rte/prune-only/fraction:0.5/pairwise"}
    assert not (out / "report.md").exists() and not (out / "tables.tex").exists()


def test_prune_recover_group_compares_with_control(tmp_path):
    records = make_records(tasks=("mrpc",), methods={"original": ["none"], "michel": ["fraction:0.5"]},
                           conditions=("prune-only", "prune+recover"))
    out = build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=500,
                       n_boot_examples=100)
    md = (out / "report.md").read_text()
    assert "headline: prune + recover vs the fine-tuning control" in md
    cf = pd.read_csv(out / "comparisons.csv")
    rec = cf[(cf.group == "prune+recover") & (cf.seeds == "all")]
    assert {(m, k) for m, k in zip(rec.method, rec.kind)} == {("control", "original"), ("michel", "original"),
                                                               ("michel", "control")}


def test_cli_command(tmp_path):
    records = make_records(tasks=("mrpc",), seeds=(0, 1), methods={"original": ["none"], "michel": ["fraction:0.5"]})
    run = write_run(tmp_path / "run", records)
    result = CliRunner().invoke(report_cmd, [str(run), "--no-plots", "--format", "md", "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    assert "## MRPC (acc)" in result.output and (tmp_path / "rep" / "report.md").exists()
    bad = CliRunner().invoke(report_cmd, [str(run), "--format", "docx", "--no-plots"])
    assert bad.exit_code != 0 and "unknown format" in bad.output


# --------------------------------------------------------------------------- protocol 2: the fair comparison


def test_base_failures_leave_every_number_and_degenerate_runs_stay(tmp_path):
    """Protocol §6, no survivorship: a seed whose base model failed leaves the task's statistics before any
    comparison; a degenerate pruned run stays in the headline numbers (and only the labelled survivors view
    drops it)."""
    records = make_records(tasks=("cola",), seeds=(0, 1, 2, 3),
                           methods={"original": ["none"], "michel": ["fraction:0.5"]},
                           degenerate={("cola", 1, "original"), ("cola", 2, "michel")})
    run = write_run(tmp_path / "run", records)
    (r,) = analyse(load_runs([run]), n_boot=200, n_boot_examples=50)
    assert r.base_failed_seeds == [1] and r.seeds == [0, 2, 3]
    michel = next(u for u in r.units if u.name == "michel")
    s = r.unit_stats[michel]
    scores = {rec["seed"]: 100 * rec["score"] for rec in records if rec["method"] == "michel"}
    assert (s.n, s.degenerate, s.n_survivors) == (3, 1, 2)
    assert s.mean == pytest.approx(np.mean([scores[0], scores[2], scores[3]]))  # the degenerate seed 2 counts
    assert s.mean_survivors == pytest.approx(np.mean([scores[0], scores[3]]))
    c = r.comparison(michel, "original")
    assert c.seeds == [0, 2, 3] and c.all.stats.n == 3 and c.survivors.stats.n == 2
    md = (build_report([run], plots=False, echo=False, n_boot=200, n_boot_examples=50) / "report.md").read_text()
    assert "Base failures left out" in md and "1 seed(s): 1." in md
    # the failed seed's scores are shown apart, for inspection
    failed = md[md.index("**CoLA, the base-failed seeds**"):].split("\n\n")[1]
    assert "| seed 1 " in failed.splitlines()[0]
    michel_line = next(l for l in failed.splitlines() if l.startswith("| michel "))
    assert tables_num(scores[1]) in michel_line
    assert "CoLA, sensitivity view, survivors only" in md
    assert "Degenerate pruned runs" in md and "stay in every number of this table" in md


def test_pairwise_tests_only_rows_with_equal_head_counts_with_holm_among_them(tmp_path):
    """Every pair of pruned rows; a pair with different head counts on some seed is listed without a test (protocol
    §3); Holm runs over the tested pairs only, and the "vs" columns never test different counts either."""
    records = make_records(tasks=("rte",), seeds=tuple(range(6)),
                           methods={"original": ["none"], "michel": ["fraction:0.5"], "confidence": ["fraction:0.5"],
                                    "random": ["fraction:0.5", "fraction:0.25"]})
    run = write_run(tmp_path / "run", records)
    (r,) = analyse(load_runs([run]), n_boot=200, n_boot_examples=50)
    assert len(r.pairwise) == 6  # 4 pruned rows
    tested = [c for c in r.pairwise if c.tested]
    assert {frozenset((c.target.budget, c.reference.budget)) for c in tested} == {frozenset({"fraction:0.5"})}
    assert len(tested) == 3 and all(c.kind == "pair" for c in r.pairwise)
    for c in r.pairwise:
        if not c.tested:
            assert c.count_mismatch == list(range(6)) and np.isnan(c.all.stats.p_exact) and np.isnan(c.all.p_holm)
    p = [c.all.stats.p_exact for c in tested]
    np.testing.assert_allclose([c.all.p_holm for c in tested], multipletests(p, method="holm")[1])
    for c in tested:  # the exact sign-flip p of the paired seed differences, by definition
        d = [r.unit_stats[c.target].scores[s] - r.unit_stats[c.reference].scores[s] for s in c.seeds]
        assert c.all.stats.p_exact == pytest.approx(stats.sign_flip_test(d)["p"])
    md = (build_report([run], plots=False, echo=False, n_boot=200, n_boot_examples=50) / "report.md").read_text()
    assert "**RTE pairwise**" in md and "counts differ (6/6 seeds)" in md
    assert "(3 tested pair(s) in 1 family)" in md
    cf = pd.read_csv(run / "report" / "comparisons.csv")
    assert len(cf[(cf.kind == "pair") & (cf.seeds == "all")]) == 6
    assert set(cf[(cf.kind == "pair") & ~cf.tested].count_mismatch_seeds) == {"0 1 2 3 4 5"}


def test_null_reward_control_rows_give_exact_p_outside_every_holm_family(tmp_path):
    """auber-null is there for its head count: its comparisons keep their exact p, get no Holm p, and do not enlarge
    the family of the methods' tests (Holm over the others equals statsmodels' over their p alone)."""
    records = make_records(tasks=("rte",), seeds=tuple(range(6)), conditions=("prune-only", "prune+recover"),
                           methods={"original": ["none"], "random": ["fraction:0.5"], "michel": ["fraction:0.5"],
                                    "auber": ["own"], "auber-null": ["own"]})
    run = write_run(tmp_path / "run", records)
    results = analyse(load_runs([run]), n_boot=200, n_boot_examples=50)
    for r in results:
        outside = [c for c in (*r.comparisons, *r.pairwise) if "auber-null" in (c.target.name, c.reference.name)]
        assert outside and all(not c.in_family and np.isnan(c.all.p_holm) for c in outside)
        assert all(np.isfinite(c.all.stats.p_exact) for c in outside if c.tested)
        inside = [c for c in (*r.comparisons, *r.pairwise) if c.in_family and c.tested]
        assert all("auber-null" not in (c.target.name, c.reference.name) for c in inside)
        for family_id in {c.family for c in inside}:
            at = [c for c in inside if c.family == family_id]
            np.testing.assert_allclose([c.all.p_holm for c in at],
                                       multipletests([c.all.stats.p_exact for c in at], method="holm")[1])
    build_report([run], plots=False, echo=False, n_boot=200, n_boot_examples=50)
    md = (run / "report" / "report.md").read_text()
    headline = md[md.index("## RTE (acc) — headline"):md.index("## RTE (acc) — prune-only")]
    fams = {c.family for c in results[0].comparisons if c.in_family and c.tested}
    m = sum(1 for c in results[0].comparisons if c.in_family and c.tested)
    assert f"({m} comparison(s) in {len(fams)} families" in headline and "null control, exact" in headline
    cf = pd.read_csv(run / "report" / "comparisons.csv")
    assert set(cf[cf.method == "auber-null"].in_family) == {False} and cf[cf.method == "auber-null"].p_holm.isna().all()


def test_a_superseded_row_stays_shown_but_out_of_every_holm_family(tmp_path):
    """results/quick-protocol2: one MRPC seed kept a Voita record of an option set a later run replaced. Its row
    (n = 1) stays in the tables, but its comparisons give their exact p outside the Holm families, so every
    in-family p (vs rows and pairwise) equals the one of the same folder without that record."""
    records = make_records(tasks=("rte",), seeds=tuple(range(6)), conditions=("prune-only", "prune+recover"),
                           methods={"original": ["none"], "random": ["fraction:0.5"], "michel": ["fraction:0.5"],
                                    "voita": ["fraction:0.5"]})
    old = [dict(r, cell=r["cell"].replace("opts=abc123", "opts=old999"), method_options={"v": 1})
           for r in records if r["method"] == "voita" and r["seed"] == 1]
    plans = [{"cells": [r["cell"] for r in old]}, {"cells": [r["cell"] for r in records]}]
    runs = {}
    for name, recs in (("with", records + old), ("without", records)):
        runs[name] = write_run(tmp_path / name, recs)
        (runs[name] / "runs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in plans))
    data = load_runs([runs["with"]])
    assert data.superseded_records == {r["cell"] for r in old}
    got = analyse(data, n_boot=200, n_boot_examples=50)
    want = analyse(load_runs([runs["without"]]), n_boot=200, n_boot_examples=50)
    assert [r.group for r in got] == [r.group for r in want]
    for r, w in zip(got, want):
        (row,) = r.superseded
        assert row.name == "voita" and row.opts == "old999" and r.unit_stats[row].n == 1 and not w.superseded
        outside = [c for c in (*r.comparisons, *r.pairwise) if row in (c.target, c.reference)]
        assert outside and all(c.outside_family == "superseded" and np.isnan(c.all.p_holm) for c in outside)
        assert any(c.tested and np.isfinite(c.all.stats.p_exact) for c in outside)
        name = lambda u: u.label.replace(" opts=abc123", "")  # noqa: E731 (the hash shows where two sets ran)
        for family, wanted in ((r.comparisons, w.comparisons), (r.pairwise, w.pairwise)):
            inside = {(name(c.target), name(c.reference)): c.all.p_holm for c in family if c.in_family}
            assert inside == {(name(c.target), name(c.reference)): c.all.p_holm for c in wanted}
    build_report([runs["with"]], plots=False, echo=False, n_boot=200, n_boot_examples=50)
    md = (runs["with"] / "report" / "report.md").read_text()
    assert "superseded, exact" in md and "Superseded rows (voita opts=old999)" in md
    assert "1 pair(s) with a superseded row give their exact p outside it" not in md  # 3 pruned rows beside it
    assert "3 pair(s) with a superseded row give their exact p outside it" in md
    cf = pd.read_csv(runs["with"] / "report" / "comparisons.csv", keep_default_na=False, na_values=[""])
    old_rows = cf[cf.opts == "old999"]
    assert not old_rows.empty and set(old_rows.outside_family) == {"superseded"} and old_rows.p_holm.isna().all()


def test_a_task_whose_every_seed_is_a_base_failure_claims_no_pairwise_p(tmp_path):
    """WNLI in results/quick-protocol2: every base model failed, so no pair has a seed; the pairwise note must not
    say that the null-reward control's pairs give an exact p (they have none)."""
    records = make_records(tasks=("rte",), seeds=(0, 1, 2), conditions=("prune-only", "prune+recover"),
                           methods={"original": ["none"], "random": ["fraction:0.5"], "auber": ["own"],
                                    "auber-null": ["own"]}, degenerate={("rte", s, "original") for s in range(3)})
    assert all(r["base_failed"] for r in records)
    md = (build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=100,
                       n_boot_examples=20) / "report.md").read_text()
    assert "**RTE pairwise**" not in md  # no seed, no pairwise table (issue 42, item 11): no note claims a p
    assert "null-reward control give" not in md
    cf = pd.read_csv(tmp_path / "run" / "report" / "comparisons.csv")
    assert len(cf) and (cf.n == 0).all() and not cf.tested.any()  # no paired seed: no comparison is a test
    assert "counts differ (0/0 seeds)" not in md


def test_a_pruned_row_that_pruned_no_head_is_not_tested_against_one_that_did(tmp_path):
    """A method that decides its own count can prune 0 heads (AUBER, auber-null): only original and control are
    exempt from the equal-count rule, not every row at 0."""
    records = make_records(tasks=("rte",), seeds=tuple(range(6)),
                           methods={"original": ["none"], "random": ["fraction:0.5"], "auber": ["own"]})
    for r in records:
        if r["method"] == "auber":
            r["heads_pruned"], r["budget"]["achieved"], r["mask"] = 0, 0, [[1] * HEADS for _ in range(LAYERS)]
    (r,) = analyse(load_runs([write_run(tmp_path / "run", records)]), n_boot=200, n_boot_examples=50)
    random_unit = next(u for u in r.units if u.name == "random")
    vs_auber = r.comparison(random_unit, "auber")
    assert not vs_auber.tested and vs_auber.count_mismatch == list(range(6)) and np.isnan(vs_auber.all.p_holm)
    assert r.pairwise == []  # random − auber is the "vs auber" comparison: one test, one family, not repeated
    assert r.comparison(random_unit, "original").tested  # the unpruned reference is always a test


def test_the_headline_table_comes_first_with_each_rows_weights_and_the_own_fine_tuning_row(tmp_path):
    records = make_records(tasks=("mrpc",), methods={"original": ["none"], "michel": ["matched:auber"],
                                                     "auber": ["own"]}, conditions=("prune-only", "prune+recover"))
    own = [dict(r, condition="own-fine-tuning", retrained=True, schema=2, weights="own",
                cell=r["cell"].replace("|prune-only|", "|own-fine-tuning|"))
           for r in records if r["method"] == "auber" and r["condition"] == "prune-only"]
    for r in records + own:
        r["mask"][0] = [0] * HEADS if r["method"] == "auber" else r["mask"][0]  # AUBER's masks empty layer 0
        r["heads_pruned"] = r["budget"]["achieved"] = sum(v == 0 for row in r["mask"] for v in row)
    run = write_run(tmp_path / "run", records + own)
    md = (build_report([run], plots=False, echo=False, n_boot=200, n_boot_examples=50) / "report.md").read_text()
    headline = md.index("## MRPC (acc) — headline: prune + recover vs the fine-tuning control")
    prune_only = md.index("## MRPC (acc) — prune-only")
    assert headline < prune_only
    table = md[headline:prune_only]
    cells = lambda text, name: next([c.strip() for c in l.strip("|").split("|")]  # noqa: E731
                                    for l in text.splitlines() if l.startswith(f"| {name} "))
    own_row = cells(table, "auber, own fine-tuning")
    assert own_row[1] == "own fine-tuning" and own_row[6] == "1.0 (max 1)"  # weights; layers emptied
    assert cells(table, "michel +recover")[1] == "base + recovery"
    assert cells(md[prune_only:], "michel")[1] == "base"


def test_mask_heatmaps_leave_out_seeds_whose_base_model_failed(tmp_path):
    from headprune_bench.benchmark.report.load import load_runs
    from headprune_bench.benchmark.report.plots import _mask_panels

    records = make_records(tasks=("mrpc",), seeds=(0, 1, 2), methods={"original": ["none"], "random": ["heads:3"]},
                           degenerate={("mrpc", 1, "original")})
    write_run(tmp_path, records)
    panels = _mask_panels(load_runs([tmp_path]), "mrpc")
    assert [(u.name, n) for u, _, n in panels] == [("random", 2)]
    kept = [r for r in records if r["method"] == "random" and r["seed"] != 1]
    expected = 1.0 - np.mean([np.asarray(r["mask"], dtype=float) for r in kept], axis=0)
    assert np.array_equal(panels[0][1], expected)


def test_a_run_whose_every_base_model_failed_says_so_instead_of_n_0(tmp_path):
    records = make_records(tasks=("wnli",), seeds=(0,), methods={"original": ["none"], "random": ["fraction:0.5"]},
                           degenerate={("wnli", 0, "original")})
    write_run(tmp_path, records)
    md = (build_report([tmp_path], plots=False, echo=False) / "report.md").read_text()
    assert "Every seed's base model failed" in md and "n = 0 seeds" not in md
    # issue 42, item 11: no table of "n = 0" rows, no list with an empty field
    assert "No seed with a working base model: every row has n = 0 (rows: original; random [fraction:0.5])." in md
    section = md[md.index("## WNLI"):md.index("## Cross-task")]
    assert "| original " not in section.split("base-failed seeds")[0]  # no table before the failed seeds' scores
    assert "seeds: none (n = 0)." in md and "1 seed(s): 0." in md
    assert "None: no seed of any task has a working base model" in md and "## All comparisons (" not in md
    assert "A smoke run" not in md  # its runs.jsonl names no smoke preset


def test_a_smoke_folder_says_at_the_top_that_it_is_a_plumbing_check(tmp_path):
    from headprune_bench.benchmark.report.load import preset_of
    from headprune_bench.benchmark.store.jsonl import RecordStore

    assert (preset_of(["run", "--preset", "smoke"]), preset_of(["--preset=paper"]), preset_of([])) == (
        "smoke", "paper", "quick")
    records = make_records(tasks=("wnli",), seeds=(0,), methods={"original": ["none"], "random": ["fraction:0.5"]},
                           degenerate={("wnli", 0, "original")})
    write_run(tmp_path, records)
    RecordStore(tmp_path).add_plan({"argv": ["--preset", "smoke"], "cells": [r["cell"] for r in records]})
    md = (build_report([tmp_path], plots=False, echo=False) / "report.md").read_text()
    assert md.index("**A smoke run: a plumbing check, not a result.**") < md.index("## WNLI")
    RecordStore(tmp_path).add_plan({"argv": ["--preset", "quick"], "cells": []})  # a folder of several presets
    md = (build_report([tmp_path], plots=False, echo=False) / "report.md").read_text()
    assert "A smoke run" not in md


def test_every_row_of_a_base_failed_task_names_its_level(tmp_path):
    """Issue 64, item 3: the base-failed seeds' table and the "(rows: ...)" list showed `random` once per level with
    nothing to tell the levels apart, and joined names that hold commas with commas."""
    records = make_records(tasks=("rte",), seeds=(0,), degenerate={("rte", 0, "original")},
                           methods={"original": ["none"], "random": ["fraction:0.25", "fraction:0.5"],
                                    "voita": ["fraction:0.5"]}, conditions=("prune-only", "own-fine-tuning"))
    md = (build_report([write_run(tmp_path / "run", records)], plots=False, echo=False, n_boot=50,
                       n_boot_examples=10) / "report.md").read_text()
    assert "(rows: original; random [fraction:0.25]; random [fraction:0.5]; voita [fraction:0.5]" in md
    table = md[md.index("the base-failed seeds"):]
    assert "| random   | fraction:0.25 |" in table and "| random   | fraction:0.5  |" in table
