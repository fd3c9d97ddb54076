"""Compact headline tables (prune+recover vs the fine-tuning control) of this folder's report, for its README.

Reads `report/scores.csv` and `report/comparisons.csv` as `bench report results/quick-protocol2` writes them and
prints, per task, one row per unit of the report's first table: n seeds, score mean ± SD (percent points, MCC x 100
for CoLA), heads pruned (mean over seeds), layers emptied (mean), degenerate runs, and the paired comparison with the
control over every seed (Δ, 95% percentile bootstrap CI over seeds, exact sign-flip p, Holm-adjusted p within the
table). Then the pairwise family: how many pairs were tested and which reach Holm p < .05. No number is computed
here beyond formatting, but one: with ``--counts``, AUBER's head count against its null-reward control's
(auber-null), per (task, seed) of this folder's `records.jsonl` (prune-only cells, base failures left out, seeds
below ``--seeds N``), and the exact two-sided sign test over the untied pairs (scipy's binomtest at 0.5), over all
tasks and then per task.

    python results/quick-protocol2/headline.py [REPORT_DIR] [--counts] [--seeds N] [--folder RUN_DIR]
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from headprune_bench.benchmark.report.units import task_label

GROUP = "prune+recover"
SUFFIX = {"prune+recover": " +recover", "own-fine-tuning": ", own fine-tuning", "prune-only": ""}


def label(row, budgets: int, opts: int) -> str:
    """The row's name as the report's first table gives it; its budget and options hash only where the table has
    several of them (else rows would share a name)."""
    if row.method in ("original", "control"):
        return row.method
    extra = (f" [{row.budget}]" if budgets > 1 else "") + (f" opts={row.opts}" if opts > 1 and row.opts else "")
    return f"{row.method}{extra}{SUFFIX.get(row.condition, ' ' + row.condition)}"


def fmt(v, digits=2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.{digits}f}".replace("-", "−")


def p_text(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


def main(report: Path) -> None:
    if not (report / "scores.csv").exists():
        sys.exit(f"{report}: no scores.csv; run `bench report results/quick-protocol2` first")
    scores = pd.read_csv(report / "scores.csv", keep_default_na=False, na_values=[""], dtype={"opts": str})
    comps = pd.read_csv(report / "comparisons.csv", keep_default_na=False, na_values=[""], dtype={"opts": str})
    keys = ["task", "group", "method", "budget", "condition", "opts"]
    for frame in (scores, comps):
        frame["opts"] = frame["opts"].fillna("")
    control = comps[(comps.kind == "control") & (comps.seeds == "all")]
    for task, table in scores[scores.group == GROUP].groupby("task", sort=False):
        metric = table.metric.iloc[0]
        print(f"\n**{task_label(task)}** ({'MCC x 100' if metric == 'matthews_correlation' else metric}, dev; "
              f"majority class {table.majority.iloc[0]:.2f})\n")
        if (table.n == 0).all():  # every seed a base failure (protocol §6): nothing to table
            print(f"Every seed is a base failure ({int(table.base_failed_seeds.max())} seed(s)): no statistic; "
                  "the report lists each row's scores on those seeds.")
            continue
        print("| row | n | score mean ± SD | heads pruned | layers emptied | Δ vs control [95% CI] | p exact | p Holm "
              "| degenerate |")
        print("|---|---|---|---|---|---|---|---|---|")
        merged = table.merge(control, on=keys, how="left", suffixes=("", "_c"))
        pruned = merged[~merged.method.isin(["original", "control"])]
        budgets, opts = pruned.budget.nunique(), pruned.groupby("method").opts.nunique().max()
        for row in merged.itertuples():
            ci = "" if math.isnan(row.ci_low) else f" [{fmt(row.ci_low)}, {fmt(row.ci_high)}]"
            delta = "—" if math.isnan(row.mean_diff) else fmt(row.mean_diff) + ci
            sd = "" if math.isnan(row.sd) else f" ± {row.sd:.2f}"
            print(f"| {label(row, budgets, opts)} | {row.n} | {row.mean:.2f}{sd} | {row.heads_pruned:.1f} | "
                  f"{row.layers_emptied:.1f} | {delta} | {p_text(row.p_exact)} | {p_text(row.p_holm)} | "
                  f"{row.degenerate} |")
        pairs = comps[(comps.task == task) & (comps.group == GROUP) & (comps.kind == "pair") & (comps.seeds == "all")]
        tested = pairs[pairs.tested.astype(str) == "True"]
        if "in_family" in pairs:  # pairs with a null-reward control: exact p only, outside the Holm family
            tested = tested[tested.in_family.astype(str) == "True"]
        hits = tested[tested.p_holm < 0.05]
        print(f"\nPairwise ({task}): {len(tested)} pairs with equal head counts in the Holm family, "
              f"{len(pairs) - len(tested)} others (counts differ, or outside the family: a null-reward control or "
              f"a superseded row); smallest exact p {p_text(tested.p_exact.min())}, Holm p < .05: "
              + (", ".join(f"{label(r, budgets, opts)} vs {r.vs} ({fmt(r.mean_diff)}, p Holm {p_text(r.p_holm)})"
                           for r in hits.itertuples()) or "none"))


def counts(folder: Path, seeds: int | None) -> None:
    """AUBER's heads pruned against auber-null's per (task, seed), and the sign test (module docstring)."""
    import json

    from scipy.stats import binomtest

    pairs: dict[tuple[str, int], dict[str, int]] = {}
    for line in (folder / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        if (r["method"] in ("auber", "auber-null") and r["condition"] == "prune-only" and not r["base_failed"]
                and (seeds is None or r["seed"] < seeds)):
            pairs.setdefault((r["task"], r["seed"]), {})[r["method"]] = r["heads_pruned"]
    pairs = {k: v for k, v in sorted(pairs.items()) if len(v) == 2}
    print("\n| task | seed | auber | auber-null |\n|---|---|---|---|")
    for (task, seed), v in pairs.items():
        print(f"| {task_label(task)} | {seed} | {v['auber']} | {v['auber-null']} |")
    scopes = {"": pairs}  # every (task, seed) pair, then each task's own
    for task in sorted({task for task, _ in pairs}):
        scopes[f"{task_label(task)}: "] = {k: v for k, v in pairs.items() if k[0] == task}
    for scope, chosen in scopes.items():
        fewer = sum(v["auber"] < v["auber-null"] for v in chosen.values())
        more = sum(v["auber"] > v["auber-null"] for v in chosen.values())
        p = binomtest(fewer, fewer + more, 0.5).pvalue if fewer + more else math.nan
        print(f"\n{scope}AUBER pruned fewer heads than auber-null on {fewer}, more on {more}, as many on "
              f"{len(chosen) - fewer - more} of {len(chosen)} (task, seed) pairs; exact two-sided sign test over the "
              f"untied pairs: p = {p_text(p)}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, default=Path(__file__).parent / "report")
    parser.add_argument("--counts", action="store_true", help="AUBER's count against auber-null's, with a sign test")
    parser.add_argument("--seeds", type=int, default=None, help="only seeds below N for --counts")
    parser.add_argument("--folder", type=Path, default=None,
                        help="the run folder whose records.jsonl --counts reads (default: REPORT_DIR's parent)")
    args = parser.parse_args()
    folder = args.folder or args.report.parent
    if args.counts and not (folder / "records.jsonl").is_file():
        parser.error(f"--counts reads {folder / 'records.jsonl'}, which does not exist: give the run folder with "
                     "--folder")
    main(args.report)
    if args.counts:
        counts(folder, args.seeds)
