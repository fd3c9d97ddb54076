"""Tables of the report: the analysis (:mod:`benchmark.report.analysis`, :mod:`benchmark.report.crosstask`,
:mod:`benchmark.report.cells`) as text frames for Markdown and LaTeX, and as numeric frames for CSV. Scores are
percent points (MCC x 100); text cells use the report's symbols (± − — † ‡ §), turned into LaTeX by :func:`tex`.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report.analysis import (
    ALPHA,
    DEFAULT_AGAINST,
    NULL_CONTROL,
    NULL_CONTROLS,
    SUPERSEDED,
    VIEWS,
    Comparison,
    GroupResult,
    UnitStats,
)
from headprune_bench.benchmark.report.crosstask import CrossTaskSummary
from headprune_bench.benchmark.report.units import EXCLUDED_FROM_AVERAGE, condition_suffix, task_label
from headprune_bench.benchmark.store.records import (
    CONTROL,
    CONTROL_NAME,
    METRIC_LABEL,
    NO_BUDGET,
    ORIGINAL,
    PRUNE_ONLY,
    RECOVER,
    WEIGHTS,
    is_repair_condition,
    repair_of,
)

#: Significance marker per reference (Holm-adjusted exact p < ALPHA); other references get "*".
MARKERS = {ORIGINAL: "†", DEFAULT_AGAINST[1]: "‡", CONTROL_NAME: "§"}

# --------------------------------------------------------------------------- cells


def num(v: float | None, digits: int = 2, sign: bool = False) -> str:
    """A number with ``digits`` decimals (``+`` with ``sign``), a true minus sign, no ``-0.00``; ``—`` for
    None / NaN / inf."""
    if v is None or not np.isfinite(v):
        return "—"
    text = f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"
    if float(text) == 0:  # no "-0.00"
        text = f"{0:+.{digits}f}" if sign else f"{0:.{digits}f}"
    return text.replace("-", "−")


def pm(mean: float, sd: float) -> str:
    """``mean ± sd`` (just the mean when the SD is NaN; ``—`` without a mean)."""
    if not np.isfinite(mean):
        return "—"
    return num(mean) + ("" if not np.isfinite(sd) else f" ± {num(sd)}")


def p_text(p: float | None) -> str:
    """A p-value with 3 significant digits, ``<0.001`` below that, ``—`` for None / NaN."""
    if p is None or not np.isfinite(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3g}"


def _p_or_undefined(p: float, notes: str, undefined: str) -> str:
    """A secondary test's p, or "undefined" where :mod:`benchmark.stats` said the test is undefined (differences
    constant, or all zero, up to floating-point rounding)."""
    return "undefined" if not np.isfinite(p) and undefined in str(notes) else p_text(p)


def _ci(low: float, high: float) -> str:
    return f"[{num(low)}, {num(high)}]" if np.isfinite(low) else "—"


def _diff_ci(c: Comparison, which: str) -> str:
    s = c.view(which).stats
    if s.n == 0:
        return "—"
    return num(s.mean_diff, sign=True) + (f" {_ci(s.ci_low, s.ci_high)}" if np.isfinite(s.ci_low) else "")


def marker(kind: str) -> str:
    """The significance marker of a reference (:data:`MARKERS`, else ``*``)."""
    return MARKERS.get(kind, "*")


def md_table(df: pd.DataFrame) -> str:
    """A frame as a Markdown table (text as is, no number parsing); ``(none)`` when empty."""
    if df.empty:
        return "(none)\n"
    return df.to_markdown(index=False, disable_numparse=True) + "\n"


_TEX_REPL = [("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"), ("{", r"\{"), ("}", r"\}"),
             ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}")]
_TEX_SYMBOLS = [("±", r"$\pm$"), ("−", "$-$"), ("†", r"\textsuperscript{\dag}"), ("‡", r"\textsuperscript{\ddag}"),
                ("§", r"\textsuperscript{\S}"), ("Δ", r"$\Delta$"), ("—", "---"), ("×", r"$\times$"),
                ("≥", r"$\geq$"), ("≤", r"$\leq$"), ("<", r"$<$"), (">", r"$>$")]


def tex(text: Any) -> str:
    """Escape a cell for LaTeX and turn the report's Unicode symbols (and ``**bold**``) into LaTeX."""
    s = str(text).replace("\\", "\x00")
    for a, b in _TEX_REPL:
        s = s.replace(a, b)
    s = s.replace("\x00", r"\textbackslash{}")
    for a, b in _TEX_SYMBOLS:
        s = s.replace(a, b)
    return re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", s)


def latex_table(df: pd.DataFrame, caption: str, label: str) -> str:
    """A frame as a booktabs ``table`` float with ``caption`` and ``label``; ``""`` when empty."""
    if df.empty:
        return ""
    body = df.map(tex) if hasattr(df, "map") else df.applymap(tex)
    body.columns = [tex(c) for c in df.columns]
    tabular = body.to_latex(index=False, escape=False, column_format="l" * df.shape[1])
    return ("\\begin{table}[t]\n\\centering\n\\small\n" + tabular + f"\\caption{{{tex(caption)}}}\n"
            f"\\label{{{label}}}\n\\end{{table}}\n")


# --------------------------------------------------------------------------- per-task tables


def group_title(r: GroupResult) -> str:
    """Heading of a (task, group) table, e.g. ``MRPC (acc) — headline: prune + recover vs the fine-tuning control``
    or ``MRPC (acc) — prune-only (the mask alone)``."""
    if r.group == PRUNE_ONLY:
        suffix = " — prune-only (the mask on the base weights, no re-training)"
    elif is_repair_condition(r.group):
        suffix = (f" — {r.group}: the prune-only mask on the base weights, repaired by {repair_of(r.group)} "
                  f"(no re-training)")
    elif any(u.condition in (RECOVER, CONTROL) for u in r.units):
        suffix = " — headline: prune + recover vs the fine-tuning control"
    else:  # --no-recover: only the re-training methods' own weights (and the original) are in this group
        suffix = " — the methods' own fine-tuned weights (no prune + recover run)"
    return f"{task_label(r.task)} ({METRIC_LABEL.get(r.metric, r.metric)}){suffix}"


def heads_cell(s: UnitStats, heads_total: float) -> str:
    """The "heads pruned" cell of a table row: mean pruned / total, flagged when some seed missed its own target
    (e.g. ``0.0/72 ⚠ target 22, missed on 3/3 seeds``; ``⚠ targets 31-55, ...`` when the targets differ between
    seeds, as under a matched budget), so an off-budget row is never read as on budget."""
    total = int(heads_total) if np.isfinite(heads_total) else "?"
    text = f"{num(s.heads_pruned, 1)}/{total}"
    if s.off_budget:
        low, high = s.target_range
        wanted = f"target {low:g}" if low == high else f"targets {low:g}–{high:g}"
        text += f" ⚠ {wanted}, missed on {s.off_budget}/{s.n} seeds"
    return text


WEIGHTS_LABEL = {"base": "base", "base+recovery": "base + recovery", "own": "own fine-tuning",
                 "own+recovery": "own fine-tuning + recovery (protocol 1)"}
"""How a table names the weights a row evaluates (``Record.weights``)."""


def _p_cell(c: Comparison, which: str) -> str:
    """The Holm p of a comparison, or why there is none (no paired seed; different head counts on some seed; a
    null-reward control or a superseded row, outside the family: its exact p instead)."""
    if not c.seeds:
        return "—"
    if not c.tested:
        return f"counts differ ({len(c.count_mismatch)}/{len(c.seeds)} seeds)"
    if not c.in_family:
        p = c.view(which).stats.p_exact
        return f"{c.outside_family}, exact {p_text(p)}" if np.isfinite(p) else "—"
    return p_text(c.view(which).p_holm)


def task_table(r: GroupResult, which: str = "all") -> pd.DataFrame:
    """The Table-2 layout of one (task, group) as text cells. ``which``: "all" seeds (degenerate pruned runs
    included: the headline) or "survivors" (pairs with a degenerate side left out: a sensitivity view).

    Rows: the table's units; columns: method (``+recover``, ``, own fine-tuning``), weights it evaluates, budget,
    n, mean ± SD, heads pruned, layers emptied (mean, max), per reference Δ [95% CI] with its marker and Holm p,
    then degenerate counts ("all") or left-out seeds ("survivors").
    """
    metric = METRIC_LABEL.get(r.metric, r.metric)
    rows = []
    for u in r.units:
        s = r.unit_stats[u]
        n, mean, sd = s.view(which)
        weights = s.weights or WEIGHTS.get(u.condition, "")  # (no seed left: the condition's weights)
        row = {"method": u.row_name, "weights": ", ".join(WEIGHTS_LABEL.get(w, w) for w in weights.split(", ")),
               "budget": u.budget if u.budget != NO_BUDGET else "—", "n": str(n),
               f"{metric} mean ± SD": pm(mean, sd), "heads pruned": heads_cell(s, r.heads_total),
               "layers emptied": f"{num(s.layers_emptied, 1)} (max {s.layers_emptied_max})" if s.n else "—"}
        for kind in r.references:  # the --against names that had a reference row here
            comp = r.comparison(u, kind)
            p = comp.view(which).p_holm if comp else math.nan
            mark = marker(kind) if np.isfinite(p) and p < ALPHA else ""
            row[f"Δ vs {kind} [95% CI]"] = _diff_ci(comp, which) + mark if comp else "—"
            row[f"p vs {kind} (Holm)"] = _p_cell(comp, which) if comp else "—"
        if which == "all":
            row["degenerate"] = str(s.degenerate)
        else:
            row["left out"] = str(s.n - s.n_survivors)
        rows.append(row)
    return pd.DataFrame(rows)


def failed_seeds_table(r: GroupResult) -> pd.DataFrame:
    """The scores of the base-failed seeds, one row per unit (method and budget) and a column per seed: shown apart,
    in no statistic (empty without base failures)."""
    if not r.failed_scores:
        return pd.DataFrame()
    seeds = sorted({s for scores in r.failed_scores.values() for s in scores})
    return pd.DataFrame([{"method": u.row_name, "budget": u.budget if u.budget != NO_BUDGET else "—",
                          **{f"seed {s}": num(r.failed_scores[u].get(s)) for s in seeds}}
                         for u in r.units if u in r.failed_scores])


def pairwise_table(r: GroupResult, which: str = "all") -> pd.DataFrame:
    """Every pair of the group's pruned rows (:attr:`GroupResult.pairwise`): ``row − reference``, n, Δ [95% CI],
    exact p and its Holm adjustment within the pairwise family; a pair of different head counts is listed
    without a test."""
    rows = []
    for c in r.pairwise:
        v = c.view(which)
        significant = c.tested and np.isfinite(v.p_holm) and v.p_holm < ALPHA
        rows.append({"row": c.target.label, "minus": c.reference.label, "n": str(v.stats.n),
                     "Δ [95% CI]": _diff_ci(c, which) + ("*" if significant else ""),
                     "p exact": p_text(v.stats.p_exact) if c.tested else "—", "p Holm": _p_cell(c, which)})
    return pd.DataFrame(rows)


def _count_text(s: UnitStats) -> str:
    counts = sorted(s.heads.values())
    spread = f", range {counts[0]}–{counts[-1]}" if counts and counts[0] != counts[-1] else ""
    return f"{num(s.heads_pruned, 1)} heads (mean over {s.n} seed(s){spread})"


def _null_control_notes(r: GroupResult) -> list[str]:
    """"AUBER pruned ...; its null-reward control pruned ..." where both have a row of the same condition."""
    notes = []
    for method, control in NULL_CONTROLS.items():
        for u in r.units:
            c = next((v for v in r.units if v.name == control and v.condition == u.condition), None)
            if u.name == method and c is not None and r.unit_stats[u].n and r.unit_stats[c].n:
                notes.append(f"{u.row_name} pruned {_count_text(r.unit_stats[u])}; its null-reward control "
                             f"{c.row_name} (rewards from shuffled mini-dev labels) pruned "
                             f"{_count_text(r.unit_stats[c])}. Where the two are close, AUBER's count comes from its "
                             f"DQN's stop rule, not from what its rewards say about the heads.")
                break
    return notes


def table_notes(r: GroupResult, which: str = "all") -> list[str]:
    """The notes under a task table: majority baseline and seeds, WNLI's caveat, the smallest reachable p with
    these seeds (and whether any comparison can reach p < :data:`ALPHA`), the markers' meaning."""
    n_seeds = len(r.seeds)
    fams = Counter(c.family for c in r.comparisons if c.in_family and np.isfinite(c.view(which).stats.p_exact))
    m, m_max = sum(fams.values()), max(fams.values(), default=0)
    n_max = max({c.view(which).stats.n for c in r.comparisons} or {n_seeds})
    notes = [f"majority-class baseline: {num(r.majority)}; seeds: {', '.join(map(str, r.seeds)) or 'none'} "
             f"(n = {n_seeds})."]
    if r.base_failed_seeds:
        notes.append(f"Base failures left out (protocol.md §6: the unpruned base model of the seed is degenerate, so "
                     f"pruning it says nothing): {len(r.base_failed_seeds)} seed(s): "
                     f"{', '.join(map(str, r.base_failed_seeds))}.")
    if which == "all" and any(s.degenerate for s in r.unit_stats.values()):
        notes.append("Degenerate pruned runs (at or below the majority baseline, or one class for > 95% of dev "
                     "examples) stay in every number of this table: dropping them would bias it in the pruning "
                     "methods' favour.")
    notes += _null_control_notes(r)
    if r.task in EXCLUDED_FROM_AVERAGE:
        notes.append(f"{task_label(r.task)}'s dev set is adversarial: read every score beside the majority baseline "
                     f"({num(r.majority)}); {task_label(r.task)} is left out of cross-task averages.")
    if n_max == 0:
        notes.append("No seed is left for a comparison here." if which == "survivors" else "No paired seeds.")
        return notes
    pmin = stats.min_exact_p(n_max)
    hmin = stats.min_holm_p(n_max, m_max) if m else math.nan
    within = (f"within its declared family ({m} comparison(s) in {len(fams)} famil{'y' if len(fams) == 1 else 'ies'}, "
              f"at most {m_max} in one; "
              f"the report's \"Families\" section lists them)")
    line = (f"p: exact two-sided sign-flip test over paired seeds, Holm-adjusted {within}. With n = {n_max} paired "
            f"seeds the smallest exact p is {p_text(pmin)}")
    if m:
        line += f" and the smallest Holm-adjusted p is {p_text(hmin)}"
    line += "."
    if (np.isfinite(hmin) and hmin >= ALPHA) or pmin >= ALPHA:
        line += f" **No comparison here can reach p < {ALPHA:g} with these seeds**; run more seeds (paper preset: 10)."
    notes.append(line)
    outside = {c.outside_family for c in (*r.comparisons, *r.pairwise)}
    if NULL_CONTROL in outside:
        notes.append("Rows of a null-reward control (" + ", ".join(sorted(NULL_CONTROLS.values())) + ") show their "
                     "head count beside the method's; their comparisons give the exact p and stay out of the Holm "
                     "family: no claim is made about their scores.")
    if SUPERSEDED in outside:
        notes.append("Superseded rows (" + ", ".join(u.row_name for u in r.superseded) + "): every record of the "
                     "row ran under an option set that a later run into its folder replaced; their comparisons "
                     "give the exact p and stay out of the Holm family, which holds the experiment as it now "
                     "stands (the report's \"Option sets\" table gives each set's options).")
    if r.references:
        notes.append("Markers (Holm p < .05): " + ", ".join(f"{marker(k)} vs {k}" for k in r.references) +
                     ". Δ in percent points (MCC × 100), 95% percentile bootstrap CI over seeds.")
    return notes


# --------------------------------------------------------------------------- long forms (CSV) and their text


def _comparison_row(r: GroupResult, c: Comparison, which: str) -> dict[str, Any]:
    v = c.view(which)
    s, two = v.stats, v.two_level
    return {"task": r.task, "group": r.group, "method": c.target.name, "budget": c.target.budget,
            "condition": c.target.condition, "opts": c.target.opts or "", "vs": c.reference.label,
            "kind": c.kind, "seeds": "all" if which == "all" else "survivors",
            "n": s.n, "n_excluded": c.n_excluded if which == "survivors" else 0,
            "tested": c.tested, "in_family": c.in_family, "outside_family": c.outside_family, "holm_level": c.level,
            "family": c.family,
            "count_mismatch_seeds": " ".join(map(str, c.count_mismatch)),
            "mean_a": s.mean_a, "mean_b": s.mean_b, "mean_diff": s.mean_diff, "sd_diff": s.sd_diff,
            "ci_low": s.ci_low, "ci_high": s.ci_high, "ci2_low": two.low, "ci2_high": two.high,
            "p_exact": s.p_exact, "p_holm": v.p_holm, "significant": bool(np.isfinite(v.p_holm) and v.p_holm < ALPHA),
            "p_min": s.p_min, "p_wilcoxon": s.p_wilcoxon, "wilcoxon_stat": s.wilcoxon_stat,
            "t_stat": s.t_stat, "p_t": s.p_t, "notes": "; ".join(x for x in (s.notes, two.note) if x)}


def comparisons_frame(results: list[GroupResult]) -> pd.DataFrame:
    """Every comparison in long form (numbers in percent points), one row per (comparison, seed set); the
    pairwise family's rows have kind ``pair``."""
    return pd.DataFrame([_comparison_row(r, c, which) for r in results for c in (*r.comparisons, *r.pairwise)
                         for which in VIEWS])


def comparisons_text(cf: pd.DataFrame) -> pd.DataFrame:
    """The long form as text: every comparison over all seeds, and over the survivors where some were left out."""
    if cf.empty:
        return cf
    cf = cf[(cf.seeds == "all") | (cf.n_excluded > 0)]
    return pd.DataFrame({
        "task": cf.task, "method": cf.method + cf.condition.map(condition_suffix),
        "budget": cf.budget, "vs": cf.vs, "seeds": cf.seeds, "n": cf.n.astype(str),
        "Δ": [num(v, sign=True) for v in cf.mean_diff], "SD Δ": [num(v) for v in cf.sd_diff],
        "95% CI (seeds)": [_ci(a, b) for a, b in zip(cf.ci_low, cf.ci_high)],
        "95% CI (seeds+examples)": [_ci(a, b) for a, b in zip(cf.ci2_low, cf.ci2_high)],
        "p exact": [p_text(v) for v in cf.p_exact], "p Holm": [p_text(v) for v in cf.p_holm],
        "p Wilcoxon": [_p_or_undefined(v, n, "Wilcoxon undefined") for v, n in zip(cf.p_wilcoxon, cf.notes)],
        "p t-test": [_p_or_undefined(v, n, "t-test undefined") for v, n in zip(cf.p_t, cf.notes)],
        "notes": cf.notes,
    })


def scores_frame(results: list[GroupResult]) -> pd.DataFrame:
    """One numeric row per (task, group, unit): percent points, counts, heads pruned."""
    rows = []
    for r in results:
        for u in r.units:
            s = r.unit_stats[u]
            rows.append({"task": r.task, "group": r.group, "metric": r.metric, "method": u.name, "budget": u.budget,
                         "condition": u.condition, "opts": u.opts or "", "n": s.n, "mean": s.mean, "sd": s.sd,
                         "ci_low_t": s.ci_low, "ci_high_t": s.ci_high, "n_survivors": s.n_survivors,
                         "mean_survivors": s.mean_survivors, "sd_survivors": s.sd_survivors,
                         "heads_pruned": s.heads_pruned, "heads_total": r.heads_total, "target": s.target,
                         "off_budget": s.off_budget, "layers_emptied": s.layers_emptied,
                         "layers_emptied_max": s.layers_emptied_max, "weights": s.weights,
                         "degenerate": s.degenerate, "base_failed_seeds": len(r.base_failed_seeds),
                         "majority": r.majority})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- cross-task summary


def summary_numbers(summary: CrossTaskSummary) -> pd.DataFrame:
    """The cross-task summary, numeric (``summary.csv``): per unit, per task its mean, difference vs original (and
    majority for the tasks beside the averages), then ``tasks``, ``mean_excl_wnli``, ``diff_vs_original_excl_wnli``."""
    rows = []
    for row in summary.rows:
        u = row.unit
        out: dict[str, Any] = {"method": u.name, "budget": u.budget, "condition": u.condition, "opts": u.opts or ""}
        for t, s in row.tasks.items():
            out[t], out[f"{t}_diff_vs_original"] = s.mean, s.diff
            if t in summary.beside:
                out[f"{t}_majority"] = s.majority
        out.update(tasks=row.n_tasks, mean_excl_wnli=row.mean, diff_vs_original_excl_wnli=row.diff)
        rows.append(out)
    return pd.DataFrame(rows)


def summary_text(summary: CrossTaskSummary) -> pd.DataFrame:
    """The cross-task summary as text: averages only for rows that ran on every averaged task (a mean over a
    subset is not comparable: CoLA's MCC and MRPC's accuracy live on different scales); averages right after
    the per-task columns, the tasks beside the averages (WNLI) last."""
    rows = []
    for row in summary.rows:
        u = row.unit
        txt: dict[str, Any] = {"method": u.label.replace(f" [{u.budget}]", "") if u.budget != NO_BUDGET else u.label,
                               "budget": u.budget if u.budget != NO_BUDGET else "—"}
        for t, s in row.tasks.items():
            txt[task_label(t)] = num(s.mean) if not s.ran or np.isfinite(s.mean) else "— (base failed)"
            if t in summary.beside:
                txt[f"{task_label(t)} majority"] = num(s.majority) if s.ran else "—"
        complete = row.n_tasks == len(summary.averaged) > 0
        txt["tasks"] = f"{row.n_tasks}/{len(summary.averaged)}"
        txt["mean (no WNLI)"] = num(row.mean) if complete else "—"
        txt["Δ vs original (no WNLI)"] = (num(row.diff, sign=True)
                                          if row.n_diffs and complete and row.n_diffs == row.n_tasks else "—")
        rows.append(txt)
    txt = pd.DataFrame(rows)
    if not txt.empty:
        first = ["method", "budget"] + [task_label(t) for t in summary.tasks if t not in summary.beside] + [
            "tasks", "mean (no WNLI)", "Δ vs original (no WNLI)"]
        txt = txt[[c for c in first if c in txt.columns] + [c for c in txt.columns if c not in first]]
    return txt


def summary_notes(summary: CrossTaskSummary, results: list[GroupResult]) -> list[str]:
    """What the cross-task summary leaves out: the base-failed seeds per task, and the tasks with no seed left."""
    notes = []
    for t in summary.tasks:
        failed = summary.failed.get(t, [])
        if not failed:
            continue
        seeds = sorted({seed for r in results if r.task == t for seed in (*r.seeds, *r.base_failed_seeds)})
        gone = all(seed in failed for seed in seeds)
        notes.append(f"{task_label(t)}: base model failed on {len(failed)} of {len(seeds)} seed(s) "
                     f"({', '.join(map(str, failed))}), left out of every number of this table"
                     + ("; no seed is left, so the task is not averaged" if gone and t not in EXCLUDED_FROM_AVERAGE
                        else ""))
    return notes


# --------------------------------------------------------------------------- cost


def cost_text(cost: pd.DataFrame) -> pd.DataFrame:
    """The cost frame (:func:`headprune_bench.benchmark.report.cells.cost_frame`) as text."""
    if cost.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "task": cost.task, "method": cost.method + cost.condition.map(condition_suffix),
        "budget": cost.budget.where(cost.budget != NO_BUDGET, "—"), "n": cost.n.astype(str),
        "wall s / cell": [pm(m, s) for m, s in zip(cost.wall_s_mean, cost.wall_s_sd)],
        "pruning s": [num(v) for v in cost.prune_wall_s_mean],
        "forward examples": [f"{v:,.0f}" if np.isfinite(v) else "—" for v in cost.forward_examples_mean],
        "backward examples": [f"{v:,.0f}" if np.isfinite(v) else "—" for v in cost.backward_examples_mean],
        "device": cost.device, "machine": cost.machine})


def walls_text(walls: pd.DataFrame) -> pd.DataFrame:
    """Wall seconds per (task, seed) (:func:`benchmark.report.cells.wall_per_seed`) as text, the unit in column
    ``method``; ``—`` for a missing cell."""
    return walls.map(lambda v: "—" if not np.isfinite(v) else f"{v:.1f}" if v < 10 else f"{v:,.0f}"
                     ).reset_index(names="method")
