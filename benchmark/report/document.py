"""The report's documents: ``report.md`` (sections of text around the tables of :mod:`benchmark.report.tables`)
and ``tables.tex`` (the same tables as booktabs floats). Each ``*_section`` function returns Markdown lines,
joined with newlines by :func:`markdown`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report import tables
from headprune_bench.benchmark.report.analysis import NULL_CONTROL, SUPERSEDED, GroupResult
from headprune_bench.benchmark.report.cells import OTHER_OPTIONS
from headprune_bench.benchmark.report.crosstask import CrossTaskSummary
from headprune_bench.benchmark.report.curves import CurveFrames
from headprune_bench.benchmark.report.families import families_section
from headprune_bench.benchmark.report.load import RunData
from headprune_bench.benchmark.report.matrix import matrix_section
from headprune_bench.benchmark.report.units import budget_key, short_budget, sorted_methods, task_label
from headprune_bench.benchmark.store.jsonl import REJECTED
from headprune_bench.benchmark.store.records import METRIC_LABEL, PRUNE_ONLY

TEX_HEADER = ("% bench report tables; needs \\usepackage{booktabs}. Wide tables: wrap the tabular in "
              "\\resizebox{\\textwidth}{!}{...} (graphicx) or use table*.\n")


@dataclass
class Frames:
    """What the documents show beyond the per-task tables: the cross-task ``summary``, the long form of every
    comparison ``comparisons`` (:func:`tables.comparisons_frame`), the numeric ``cost`` frame, wall seconds per
    (task, seed) ``walls``, the ``missing`` cells, the ``option_sets``, the ``plots`` written (PNG and PDF) and, for
    a folder with a sweep, the ``curves`` (:func:`benchmark.report.curves.curve_frames`), and the declared
    ``families`` (:func:`benchmark.report.families.families_frame`)."""

    summary: CrossTaskSummary
    comparisons: pd.DataFrame
    cost: pd.DataFrame
    walls: pd.DataFrame
    missing: pd.DataFrame
    option_sets: pd.DataFrame
    plots: list[Path]
    curves: CurveFrames | None = None
    families: pd.DataFrame | None = None
    matrix: Any = None
    """With repair cells, the selection x repair frames (:class:`benchmark.report.matrix.MatrixFrames`)."""
    matrix_plots: list[Path] = field(default_factory=list)


def table_label(r: GroupResult) -> str:
    """The LaTeX label of a (task, group) table, e.g. ``tab:mrpc`` or ``tab:mrpc-recover``."""
    return f"tab:{r.task}" + ("" if r.group == PRUNE_ONLY else "-recover")


def _has_survivors_view(r: GroupResult) -> bool:
    return (any(c.n_excluded for c in (*r.comparisons, *r.pairwise))
            or any(s.n != s.n_survivors for s in r.unit_stats.values()))


SURVIVORS_TITLE = ("sensitivity view, survivors only (not the headline: the pairs with a degenerate pruned run are "
                   "left out, which biases the comparison in the pruning methods' favour; protocol.md §6)")


def _pairwise_lines(r: GroupResult) -> list[str]:
    """The pairwise table of a group with its note (nothing with fewer than two pruned rows, or without a seed)."""
    if not r.pairwise or not r.seeds:
        return []
    fams = Counter(c.family for c in r.pairwise if c.tested and c.in_family and np.isfinite(c.all.stats.p_exact))
    m = sum(fams.values())
    within = (f"Holm within each declared family ({m} tested pair(s) in {len(fams)} "
              f"famil{'y' if len(fams) == 1 else 'ies'})")
    outside = ", ".join(f"{n} pair(s) with a {why} row" for why in (NULL_CONTROL, SUPERSEDED)
                        if (n := sum(1 for c in r.pairwise if c.tested and c.outside_family == why)))
    outside = f" ({outside} give their exact p outside it)" if outside else ""
    return [f"**{task_label(r.task)} pairwise** (every pair of pruned rows, row − minus, paired by seed; exact "
            f"sign-flip p, {within}{outside}; a pair whose head counts differ "
            "on some seed is not a test, protocol.md §3; * Holm p < .05):\n", tables.md_table(tables.pairwise_table(r)),
            ""]


def header_section(data: RunData, results: list[GroupResult]) -> list[str]:
    """Title, folders and record count, how to read scores, unreadable lines, and what the seeds can show."""
    md = ["# Head-pruning benchmark report\n",
          f"Run folder(s): {', '.join(f'`{f}`' for f in data.folders)}. Records: {len(data.records)}"
          + (f" ({len(data.duplicates)} duplicate cell(s) ignored)" if data.duplicates else "")
          + (f"; {len(data.broken)} unreadable line(s) skipped (listed below)" if data.broken else "") + ".  ",
          "Scores: the task's primary metric on the GLUE dev split in percent points (MCC × 100 for CoLA), "
          "mean ± sample SD over n seeds. Comparisons are paired by seed (same base model); Δ = row − reference.\n"]
    if data.presets == {"smoke"}:
        md.append("**A smoke run: a plumbing check, not a result.** The smoke preset fine-tunes on at most 64 "
                  "examples for one epoch, so its base models do not learn the task and its numbers mean nothing; "
                  "a comparison starts at `--preset quick` (docs/presets.md).\n")
    if data.broken:
        md.append(f"**Unreadable lines, skipped.** A record's cell among them is listed as missing; the next "
                  f"`bench run` into the folder moves each line to `{REJECTED}` (kept there, not deleted) and "
                  f"computes the missing cells again:\n")
        md += [f"- `{b.path}` line {b.line}: {b.reason}" for b in data.broken] + [""]
    if not results:
        return md + ["**No finished cells yet.**\n"]
    ns = sorted({len(r.seeds) for r in results} - {0})
    if not ns:
        return md + ["**What these seeds can show: nothing.** Every seed's base model failed (protocol.md §6), so "
                     "no statistic is computed; the scores are shown apart under each table.\n"]
    return md + ["**What these seeds can show.** " + "; ".join(
        f"n = {n} seed{'s' if n != 1 else ''}: smallest exact two-sided p = {tables.p_text(stats.min_exact_p(n))}"
        for n in ns) + ". Exact paired tests cannot give p < 2/2^n (5 seeds never reach p < .05; protocol.md §5).\n"]


def task_sections(results: list[GroupResult]) -> list[str]:
    """Each (task, group) table (headline first) with its notes, its pairwise table, and its survivors-only
    sensitivity view where some seed was left out."""
    md: list[str] = []
    for r in results:
        md.append(f"## {tables.group_title(r)}\n")
        if not r.seeds:  # every seed's base model failed: a table of "n = 0" and dashes says nothing
            md += [f"No seed with a working base model: every row has n = 0 (rows: "
                   f"{'; '.join(u.label for u in r.units)}).\n"]
        else:
            md.append(tables.md_table(tables.task_table(r)))
        md += [f"- {n}" for n in tables.table_notes(r, "all")] + [""]
        if r.failed_scores:
            md += [f"**{task_label(r.task)}, the base-failed seeds** (in no statistic above; what each row scored "
                   f"there, for inspection):\n", tables.md_table(tables.failed_seeds_table(r))]
        md += _pairwise_lines(r)
        if _has_survivors_view(r):
            md += [f"**{task_label(r.task)}, {SURVIVORS_TITLE}:**\n",
                   tables.md_table(tables.task_table(r, "survivors"))]
            md += [f"- {n}" for n in tables.table_notes(r, "survivors") if n.startswith(("p:", "No "))] + [""]
            if any(c.n_excluded for c in r.pairwise):
                md += [f"**{task_label(r.task)} pairwise, the same sensitivity view** (survivors only):\n",
                       tables.md_table(tables.pairwise_table(r, "survivors")), ""]
    return md


AREA_TEXT = ("**Area above chance (the primary summary).** Per seed, with s the score against the fraction f of "
             "heads pruned, m the majority-class baseline and s₀ the unpruned reference (prune-only: the seed's "
             "original; prune+recover: its control): the trapezoid area of max(s − m, 0) from (0, s₀) through the "
             "method's levels f₁ < … < f_K, divided by f_K and by the reference's margin s₀ − m averaged over the "
             "seeds (one constant per task and condition, so that no seed weighs more than another in a test). "
             "1 = the reference's margin kept at every level, 0 = chance or below everywhere; a level below chance "
             "counts as chance, so the area never ranks how methods fail below it. f is each seed's heads pruned / "
             "heads total. Mean ± SD over seeds, Student-t 95% CI; pairs (methods of the same levels): Δ = row − vs of "
             "the per-seed areas, 95% percentile bootstrap CI, exact sign-flip p, Holm within the declared family "
             "`task/condition/area/pairwise` (pairs with an ablation: `.../ablation`). **Area (secondary).** The "
             "plain normalised area in score units (× 100), A = (1/f_K) Σᵢ (fᵢ − fᵢ₋₁)(sᵢ + sᵢ₋₁)/2, f₀ = 0, s₀ "
             "at f₀: shown for reference, not tested.\n")


def _points_table(curves: pd.DataFrame) -> pd.DataFrame:
    """Mean ± SD score (× 100) per row (reference, methods) and level of one (task, condition)."""
    budgets = sorted(curves.budget.unique(), key=budget_key)
    rows = []
    for name in sorted_methods(list(curves.method)):
        g = curves[curves.method == name]
        for opts in dict.fromkeys(g.opts):
            cells = {r.budget: tables.pm(100 * r.mean, 100 * r.sd) for r in g[g.opts == opts].itertuples()}
            label = name + (f" opts={opts}" if opts else "")
            rows.append({"method": label, **{short_budget(b) or "unpruned": cells.get(b, "") for b in budgets}})
    return pd.DataFrame(rows)


def _chance_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Degenerate seeds (at or below chance, or one class) per pruned row and level of one (task, condition)."""
    pruned = rows[rows.kind != "reference"]
    budgets = sorted(pruned.budget.unique(), key=budget_key)
    out = []
    for name in sorted_methods(list(pruned.method)):
        g = pruned[pruned.method == name]
        for opts in dict.fromkeys(g.opts):
            cells = {r.budget: f"{int(r.degenerate)}/{int(r.n)}" for r in g[g.opts == opts].itertuples()}
            out.append({"method": name + (f" opts={opts}" if opts else ""),
                        **{short_budget(b): cells.get(b, "") for b in budgets}})
    return pd.DataFrame(out)


def _auc_lines(auc: pd.DataFrame) -> list[str]:
    """The area and pair tables of one (task, condition), with the smallest p per family and the excluded methods."""
    md = []
    methods = auc[auc.kind == "method"]
    pct = tables.num
    if not methods.empty:
        md.append(tables.md_table(pd.DataFrame({
            "method": methods.method, "levels": [", ".join(map(short_budget, v.split(";"))) for v in methods.levels],
            "n": methods.n.astype(int).astype(str),
            "area above chance ± SD": [f"{pct(m, 3)} ± {pct(s, 3)}" for m, s in zip(methods["mean"], methods.sd)],
            "95% CI (t)": [f"[{pct(a, 3)}, {pct(b, 3)}]" if np.isfinite(a) else "—"
                           for a, b in zip(methods.ci_low, methods.ci_high)],
            "area ± SD (secondary)": [tables.pm(100 * m, 100 * s) for m, s in
                                      zip(methods.area_mean, methods.area_sd)]})))
    pairs = auc[auc.kind == "pair"]
    if not pairs.empty:
        tested = pairs[np.isfinite(pairs.p_exact.astype(float))]
        md.append(tables.md_table(pd.DataFrame({
            "method": pairs.method, "vs": pairs.vs, "n": pairs.n.astype(int).astype(str),
            "Δ area above chance [95% CI]": [f"{pct(m, 3, sign=True)} [{pct(a, 3)}, {pct(b, 3)}]"
                                             if np.isfinite(m) else "—" for m, a, b in
                                             zip(pairs["mean"], pairs.ci_low, pairs.ci_high)],
            "p exact": [tables.p_text(p) for p in pairs.p_exact], "p Holm": [tables.p_text(p) for p in pairs.p_holm],
            "family": pairs.family.str.rsplit("/", n=1).str[-1],
            "Δ area (secondary)": [tables.num(100 * m, sign=True) for m in pairs.area_mean],
            "note": pairs.note})))
        for family, g in tested.groupby("family", sort=False):
            for n in sorted(set(g.n.astype(int))):
                md.append(f"- `{family}`: n = {n} seeds, {len(g)} tested pair(s): smallest exact p "
                          f"{tables.p_text(stats.min_exact_p(n))}, smallest Holm p "
                          f"{tables.p_text(stats.min_holm_p(n, len(g)))}.")
    md += [f"- excluded: {r.method} ({r.levels}): {r.note}." for r in auc[auc.kind == "excluded"].itertuples()]
    return md + [""]


def _atlas_lines(task: str, cf: CurveFrames) -> list[str]:
    """Stability beside its random expectation, and one method x method agreement matrix per level."""
    stab, agree = cf.stability[cf.stability.task == task], cf.agreement[cf.agreement.task == task]
    if stab.empty and agree.empty:
        return []
    md = [f"**{task_label(task)}, which heads are pruned** (prune-only masks; Jaccard |A ∩ B| / |A ∪ B| of the "
          "pruned head sets). Stability: mean over pairs of seeds of one method; random: the exact expectation "
          "for uniform random sets of the same sizes:\n",
          tables.md_table(pd.DataFrame({"method": stab.method, "budget": stab.budget,
                                        "level": [f"{100 * v:.1f}%" for v in stab.level], "n": stab.n.astype(str),
                                        "Jaccard (seeds)": [tables.num(v, 3) for v in stab.jaccard],
                                        "random": [tables.num(v, 3) for v in stab.random_expected]}))]
    for budget in sorted(agree.budget.unique(), key=budget_key):
        g = agree[agree.budget == budget]
        names = sorted_methods(list(g.method_a) + list(g.method_b))
        value = {(a, b): tables.num(v, 3) for a, b, v in zip(g.method_a, g.method_b, g.jaccard)}
        n = "–".join(dict.fromkeys(str(int(v)) for v in (g.n.min(), g.n.max())))
        md += [f"Agreement at {short_budget(budget)} (mean Jaccard of two methods' sets on the same seed, n = {n} "
               "seeds):\n",
               tables.md_table(pd.DataFrame([{"method": a, **{b: "—" if a == b else value.get((a, b), "")
                                                              for b in names}} for a in names]))]
    return md


def curves_section(cf: CurveFrames) -> list[str]:
    """The "Curves" section of a folder with a sweep: how areas are computed, per task and condition the score at
    each level, the areas, the pairs of areas with exact and Holm p, excluded methods, and the head-set atlas."""
    md = ["## Curves: score against the fraction of heads pruned\n", AREA_TEXT]
    md += [f"- {task_label(t)}: base model failed on {len(s)} seed(s) ({', '.join(map(str, s))}), left out of "
           "every number of this section." for t, s in cf.base_failed.items()] + [""]
    for task in dict.fromkeys(cf.curves.task):
        for condition in (PRUNE_ONLY, "prune+recover"):
            rows = cf.curves[(cf.curves.task == task)
                             & (cf.curves.condition.isin([condition] if condition == PRUNE_ONLY
                                                         else [condition, "control"]))]
            if rows.empty or not (rows.kind != "reference").any():
                continue
            metric = METRIC_LABEL.get(rows.metric.iloc[0], rows.metric.iloc[0])
            md += [f"### Curves, {task_label(task)} ({metric}), {condition}\n", tables.md_table(_points_table(rows)),
                   "", "Degenerate seeds per level (at or below the majority baseline, or one class for > 95% of dev "
                   "examples; they count as chance in the area above chance):\n",
                   tables.md_table(_chance_table(rows)), ""]
            md += _auc_lines(cf.auc[(cf.auc.task == task) & (cf.auc.condition == condition)])
        md += _atlas_lines(task, cf)
    return md


def option_sets_section(sets: pd.DataFrame) -> list[str]:
    """The methods that ran with several option sets (nothing when none did)."""
    if sets.empty:
        return []
    return ["## Option sets\n", "Some methods ran with more than one option set; each of their rows above and "
            "below carries `opts=HASH` (the first 12 hex digits of the options' hash, as in the records' cell "
            "keys). Rows of different option sets are different configurations, not seeds of one:\n",
            tables.md_table(sets), ""]


def summary_sections(frames: Frames, results: list[GroupResult]) -> list[str]:
    """Cross-task summary, every comparison in long form, cost, and wall seconds per (task, seed); the first two as
    one line each when no seed of any task has a working base model."""
    if not any(r.seeds for r in results):
        md = ["## Cross-task summary and all comparisons\n",
              "None: no seed of any task has a working base model (`summary.csv` and `comparisons.csv` hold the "
              "rows, every one with n = 0).\n"]
        return md + _cost_sections(frames)
    md = ["## Cross-task summary (WNLI left out of the averages)\n",
          tables.md_table(tables.summary_text(frames.summary)),
          "- mean: average over the non-WNLI tasks of each row's mean score, shown only for rows that ran on all "
          "of them (tasks: how many it ran on; summary.csv has the partial averages too); Δ: the "
          "average of its mean paired differences vs original. Base-failed (task, seed) pairs are left out of "
          "every number here (as in the tables), the same seeds for every row. WNLI's dev set is "
          "adversarial: compare it with its majority baseline."]
    md += [f"- {n}." for n in tables.summary_notes(frames.summary, results)] + [""]
    md += ["## All comparisons (secondary tests and the two-level bootstrap)\n",
           tables.md_table(tables.comparisons_text(frames.comparisons)),
           "- CI (seeds): percentile bootstrap over seeds. CI (seeds+examples): two-level paired bootstrap "
           "(seeds, then dev examples, same examples for both methods). p exact: sign-flip test; p Holm: within "
           "the task table; Wilcoxon signed-rank and paired t-test are secondary.\n"]
    return md + _cost_sections(frames)


def _cost_sections(frames: Frames) -> list[str]:
    """Cost per cell and wall seconds per (task, seed)."""
    md = ["## Cost\n", tables.md_table(tables.cost_text(frames.cost)), "- Wall seconds per cell: pruning, any "
           "re-fine-tuning and the dev evaluation (the seed's shared base-model fine-tuning is not counted); pruning "
           "s: the method alone; examples passed forward / backward, the dev evaluation included; machine: the CPU or "
           "GPU that ran the cells (`cost.machine`), with how many ran on each (unknown: records written before it "
           "was recorded). Seconds compare only on the same machine.\n"]
    walls = tables.md_table(tables.walls_text(frames.walls))
    return md + ["## Wall seconds per (task, seed)\n", walls,
                 "- One cell each (same definition as above); — where the cell is missing. \"base fine-tune\": the "
                 "base model's fine-tune (`base/<task>-seed<N>/train_info.json`), shared by that seed's cells. "
                 "\"total\": the sum of the rows above but for cells computed under an option set that a later "
                 "`bench run` replaced (one worker's seconds; with `--workers N` the wall clock is about 1/N of it); "
                 "— for a (task, seed) with a planned cell missing, failed or not yet run under its planned options, "
                 "or without its base fine-tune's time. CSV: `wall_per_seed.csv`.\n"]


def missing_section(missing: pd.DataFrame, planned: bool) -> list[str]:
    """The missing and failed cells (at most 60 listed; all in ``missing.csv``), relative to the planned cells
    (``planned``) or the grid seen."""
    md = ["## Missing and failed cells\n"]
    if missing.empty:
        return md + ["None: every cell " + ("planned by the folder's `bench run` commands" if planned
                                           else "of the grid tasks × seeds × methods seen") + " is present.\n"]
    n_failed = int((missing.status == "failed").sum())
    n_other = int((missing.status == OTHER_OPTIONS).sum())
    basis = ("the cells the folder's `bench run` commands planned (`runs.jsonl`)" if planned
             else "the grid tasks × seeds × methods seen")
    md.append(f"{len(missing) - n_failed - n_other} missing and {n_failed} failed cell(s) relative to {basis} "
              f"(failures: `failures.jsonl`; rerun the command to compute them)"
              + (f"; {n_other} planned cell(s) have a record only under another option set of their method "
                 f"(status \"{OTHER_OPTIONS}\": planned by a command run with other method options)"
                 if n_other else "") + ":\n")
    return md + [tables.md_table(missing.head(60))
                 + (f"\n({len(missing) - 60} more in missing.csv)\n" if len(missing) > 60 else "")]


def plots_section(paths: list[Path]) -> list[str]:
    """Links to the PNG plots (nothing without plots)."""
    if not paths:
        return []
    return ["## Plots\n", *(f"![{p.stem}](plots/{p.name})" for p in paths if p.suffix == ".png"), ""]


def markdown(data: RunData, results: list[GroupResult], frames: Frames, speed: list[str] | None = None,
             provenance: list[str] | None = None) -> str:
    """The whole ``report.md``; ``speed``: the speed section's lines (:mod:`benchmark.report.speed`), if any;
    ``provenance``: the provenance section's (:mod:`benchmark.report.provenance`), after the families."""
    md = header_section(data, results)
    if frames.curves is not None and results:
        md += curves_section(frames.curves)
    if frames.matrix is not None:
        md += matrix_section(frames.matrix, frames.matrix_plots)
    md += task_sections(results)
    md += families_section(frames.families) if frames.families is not None else []
    md += provenance or []
    md += option_sets_section(frames.option_sets)
    if results:
        md += summary_sections(frames, results)
    md += (speed or []) + missing_section(frames.missing, bool(data.planned)) + plots_section(frames.plots)
    return "\n".join(md) + "\n"


def latex(results: list[GroupResult], frames: Frames) -> str:
    """The whole ``tables.tex``: each task table (its pairwise table, its survivors view), the cross-task summary and
    the cost table."""
    parts = [TEX_HEADER]
    for r in results:
        title, notes = tables.group_title(r), tables.table_notes(r, "all")
        parts.append(tables.latex_table(tables.task_table(r), f"{title}. Mean ± SD over seeds; " + " ".join(notes[1:]),
                                        table_label(r)))
        if r.pairwise:
            parts.append(tables.latex_table(tables.pairwise_table(r), f"{title}: every pair of pruned rows, exact "
                                            "sign-flip p, Holm within the pairs.", f"{table_label(r)}-pairwise"))
        if _has_survivors_view(r):
            parts.append(tables.latex_table(tables.task_table(r, "survivors"), f"{title}, {SURVIVORS_TITLE}.",
                                            f"{table_label(r)}-survivors"))
    if results:
        parts.append(tables.latex_table(tables.summary_text(frames.summary), "Cross-task summary; WNLI beside its "
                                        "majority baseline and left out of the averages.", "tab:summary"))
        parts.append(tables.latex_table(tables.cost_text(frames.cost), "Cost per cell.", "tab:cost"))
    return "\n".join(p for p in parts if p)
