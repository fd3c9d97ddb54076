"""Issue 43's tables for this folder's README ("Curves"): per task and condition, where each method's score leaves
the unpruned reference, and the methods ranked by the area under their curves.

Reads the report's `auc.csv` and `comparisons.csv` (`bench report results/quick-protocol2 --out REPORT_DIR`) and
prints, formatting only:

1. per level, each curve method's Δ from the reference (prune-only: the unpruned model `original`; prune+recover:
   the fine-tuning control) in points, with the report's Holm-adjusted exact p (Holm within the level); bold where
   Holm p < .05; n: the seeds, where fewer than the table's most. "No detectable loss up to" is the highest level
   below the method's first level with a significant loss ("—": its lowest level has one), or before the first
   level with fewer seeds or no cell (said in brackets);
2. the methods by normalised area, highest first, with the pairs whose difference of areas has Holm p < .05 (Holm
   over the pairs of the task and condition), and the first method against each other one.

    python results/quick-protocol2/curves_table.py REPORT_DIR
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from headprune_bench.benchmark.report.units import task_label

CONDITIONS = (("prune-only", "original", "the unpruned model"),
              ("prune+recover", "control", "the fine-tuning control"))
ALPHA = 0.05


def signed(v: float) -> str:
    return f"{v:+.2f}".replace("-", "−")


def p_text(v: float) -> str:
    return "—" if v is None or math.isnan(v) else f"{v:.3g}"


def read(report: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    if not (report / "auc.csv").exists():
        sys.exit(f"{report}: no auc.csv; run `bench report results/quick-protocol2 --out {report}` first")
    options = {"keep_default_na": False, "na_values": [""], "dtype": {"opts": str}}
    auc, comps = pd.read_csv(report / "auc.csv", **options), pd.read_csv(report / "comparisons.csv", **options)
    comps["opts"] = comps["opts"].fillna("")
    return auc, comps[comps.seeds == "all"]


def level_text(budget: str) -> str:
    return f"{100 * float(budget.partition(':')[2]):.0f}%"


def by_level(task: str, condition: str, reference: str, words: str, comps: pd.DataFrame) -> None:
    tests = comps[(comps.task == task) & (comps.group == condition) & (comps.kind == reference)
                  & (comps.condition == condition) & comps.budget.str.startswith("fraction:")]
    # the curves: each (method, option set) at two or more levels, in the report's order
    counts = tests.groupby(["method", "opts"], sort=False).budget.nunique()
    curves = [key for key, n in counts.items() if n >= 2]
    if not curves:
        return
    levels = sorted(set(tests.budget), key=lambda b: float(b.partition(":")[2]))
    sets = comps.groupby("method").opts.nunique()  # as the report names rows: over the folder
    full = tests.n.max()
    print(f"\n**{task_label(task)}, {condition}**: Δ from {words} in points (Holm p within the level)\n")
    print("| method | " + " | ".join(map(level_text, levels)) + " | no detectable loss up to |")
    print("|---" * (len(levels) + 2) + "|")
    for method, opts in curves:
        cells, safe, stop = [], "", ""
        for budget in levels:
            t = tests[(tests.method == method) & (tests.opts == opts) & (tests.budget == budget)]
            if t.empty:
                cells.append("not run")
                stop = stop or "not run"
                continue
            t = t.iloc[0]
            text = f"{signed(t.mean_diff)} ({p_text(t.p_holm)}" + (f", n {t.n})" if t.n < full else ")")
            cells.append(f"**{text}**" if t.p_holm < ALPHA else text)
            if t.n < full:
                stop = stop or f"fewer seeds at {level_text(budget)}"
            elif t.p_holm < ALPHA and t.mean_diff < 0:
                stop = stop or "loss"
            safe = safe if stop else level_text(budget)
        verdict = (safe or "—") + (f" ({stop})" if stop and stop != "loss" else "")
        name = method + (f" opts={opts}" if sets[method] > 1 else "")
        print(f"| {name} | " + " | ".join(cells) + f" | {verdict} |")


def by_area(task: str, condition: str, auc: pd.DataFrame) -> None:
    rows = auc[(auc.task == task) & (auc.condition == condition)]
    methods = rows[rows.kind == "method"].sort_values("mean", ascending=False)
    if methods.empty:
        return
    pairs = rows[rows.kind == "pair"]
    print(f"\n**{task_label(task)}, {condition}**: normalised area (score units), highest first\n")
    print("| rank | method | area ± SD [95% CI] | areas differ (Holm p < .05) |\n|---|---|---|---|")
    for rank, m in enumerate(methods.itertuples(), 1):
        wins = [f"> {p.vs} ({p_text(p.p_holm)})" for p in pairs[pairs.method == m.method].itertuples()
                if p.p_holm < ALPHA and p.mean > 0]
        wins += [f"> {p.method} ({p_text(p.p_holm)})" for p in pairs[pairs.vs == m.method].itertuples()
                 if p.p_holm < ALPHA and p.mean < 0]
        losses = [f"< {p.vs} ({p_text(p.p_holm)})" for p in pairs[pairs.method == m.method].itertuples()
                  if p.p_holm < ALPHA and p.mean < 0]
        losses += [f"< {p.method} ({p_text(p.p_holm)})" for p in pairs[pairs.vs == m.method].itertuples()
                   if p.p_holm < ALPHA and p.mean > 0]
        print(f"| {rank} | {m.method} | {100 * m.mean:.2f} ± {100 * m.sd:.2f} [{100 * m.ci_low:.2f}, "
              f"{100 * m.ci_high:.2f}] | {', '.join(wins + losses) or 'none'} |")
    first = methods.method.iloc[0]
    against = []
    for other in methods.method.iloc[1:]:
        p = pairs[((pairs.method == first) & (pairs.vs == other)) | ((pairs.method == other) & (pairs.vs == first))]
        if p.empty:
            continue
        p = p.iloc[0]
        sign = 1 if p.method == first else -1
        against.append(f"{other} {signed(100 * sign * p['mean'])} (exact {p_text(p.p_exact)}, Holm "
                       f"{p_text(p.p_holm)})")
    print(f"\nFirst by area: {first}; its area minus each other one's: " + "; ".join(against) + ".")


def main(report: Path) -> None:
    auc, comps = read(report)
    for task in sorted(set(auc.task) | set(comps.task)):
        for condition, reference, words in CONDITIONS:
            by_level(task, condition, reference, words, comps)
        for condition, _, _ in CONDITIONS:
            by_area(task, condition, auc)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    main(parser.parse_args().report)
