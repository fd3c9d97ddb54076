"""Issue 40's tables for this folder's README: where `kwon` (Kwon et al. 2022) stands at fraction:0.3, what each of
its stages buys, and what a cell costs.

Reads the report's `scores.csv` and `comparisons.csv` (`bench report results/quick-protocol2 --out REPORT_DIR`) and
the folder's `records.jsonl`, and prints per task (MRPC, RTE), formatting only:

1. every row at fraction:0.3 in prune-only (against the unpruned model, `original`) and prune+recover (against the
   fine-tuning control): n seeds, score mean ± SD, Δ [95% percentile bootstrap CI over seeds], exact sign-flip p,
   Holm-adjusted p as the report computed them (prune-only: Holm within the budget level; prune+recover: within the
   task's table);
2. kwon against every other method at fraction:0.3, paired by seed (the report's pairwise family, equal head
   counts on every seed): Δ = kwon − other;
3. the stages in prune-only: kwon-search -> kwon-rearrange -> kwon (search, rearrangement, mask tuning);
4. the cost of a kwon cell from the records: the prune step (Fisher and search, rearrangement, tuning), the
   recovery, the ablations' prune steps (one thread each, wall seconds), the FLOPs the mask removes, the heads the
   rearrangement moved and how the tuning ended.

    python results/quick-protocol2/kwon_table.py REPORT_DIR [--folder RUN_DIR]
"""
from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

import pandas as pd

from headprune_bench.benchmark.report.units import task_label

LEVEL = "fraction:0.3"
TASKS = ("mrpc", "rte")
STAGES = ("kwon-search", "kwon-rearrange", "kwon")
SUFFIX = {"prune+recover": " +recover", "own-fine-tuning": ", own fine-tuning", "prune-only": ""}


def fmt(v, digits=2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.{digits}f}".replace("-", "−")


def p_text(v) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


def delta(row) -> str:
    ci = "" if math.isnan(row.ci_low) else f" [{fmt(row.ci_low)}, {fmt(row.ci_high)}]"
    return fmt(row.mean_diff) + ci


def label(method: str, condition: str) -> str:
    return f"{method}{SUFFIX.get(condition, ' ' + condition)}"


def read(report: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    if not (report / "scores.csv").exists():
        sys.exit(f"{report}: no scores.csv; run `bench report results/quick-protocol2 --out {report}` first")
    read_csv = dict(keep_default_na=False, na_values=[""], dtype={"opts": str})
    scores, comps = pd.read_csv(report / "scores.csv", **read_csv), pd.read_csv(report / "comparisons.csv", **read_csv)
    for frame in (scores, comps):
        frame["opts"] = frame["opts"].fillna("")
    # superseded option sets (a row whose every record an earlier option set computed) stay out, as in the report
    live = comps[(comps.seeds == "all") & (comps.in_family.astype(str) == "True")]
    return scores, live


def rows_at_level(task: str, scores: pd.DataFrame, comps: pd.DataFrame) -> None:
    print(f"\n**{task_label(task)}**, every row at {LEVEL} (Δ against `original` in prune-only, against the "
          "fine-tuning control in prune+recover)\n")
    print("| row | n | score mean ± SD | Δ [95% CI] | p exact | p Holm |\n|---|---|---|---|---|---|")
    for group, reference in (("prune-only", "original"), ("prune+recover", "control")):
        table = scores[(scores.task == task) & (scores.group == group)]
        ref = table[table.method == reference].iloc[0]
        print(f"| {reference} ({group}) | {ref.n} | {ref['mean']:.2f} ± {ref.sd:.2f} | — | — | — |")
        tests = comps[(comps.task == task) & (comps.group == group) & (comps.kind == reference)]
        for row in table[table.budget == LEVEL].itertuples():
            test = tests[(tests.method == row.method) & (tests.budget == LEVEL) & (tests.condition == row.condition)
                         & (tests.opts == row.opts)]
            if test.empty:  # a superseded option set
                continue
            t = test.iloc[0]
            print(f"| {label(row.method, row.condition)} | {row.n} | {row.mean:.2f} ± {row.sd:.2f} | {delta(t)} | "
                  f"{p_text(t.p_exact)} | {p_text(t.p_holm)} |")


def pairs_with(task: str, method: str, comps: pd.DataFrame, group: str) -> list[tuple[str, object, int]]:
    """The report's tested pairs of ``method`` at :data:`LEVEL` in ``group``: (other row, comparison, sign) where
    sign * mean_diff is ``method`` − other."""
    own = f"{method} [{LEVEL}]"
    pairs = comps[(comps.task == task) & (comps.group == group) & (comps.kind == "pair") & (comps.budget == LEVEL)
                  & (comps.tested.astype(str) == "True")]
    out = []
    for row in pairs.itertuples():
        me = row.method == method and row.condition in (group, "prune-only")
        if me:
            out.append((row.vs, row, 1))
        elif row.vs.startswith(own) and row.vs[len(own):] in ("", SUFFIX[group]):
            out.append((f"{label(row.method, row.condition)} [{LEVEL}]", row, -1))
    return out


def flipped(row, sign: int) -> str:
    if sign > 0:
        return delta(row)
    ci = "" if math.isnan(row.ci_low) else f" [{fmt(-row.ci_high)}, {fmt(-row.ci_low)}]"
    return fmt(-row.mean_diff) + ci


def kwon_pairs(task: str, comps: pd.DataFrame) -> None:
    print(f"\n**{task_label(task)}**, kwon − each other method at {LEVEL}, paired by seed\n")
    print("| other | prune-only Δ [95% CI] | p exact | p Holm | prune+recover Δ [95% CI] | p exact | p Holm |")
    print("|---|---|---|---|---|---|---|")
    found: dict[str, dict[str, tuple]] = {}
    for group in ("prune-only", "prune+recover"):
        for other, row, sign in pairs_with(task, "kwon", comps, group):
            name = re.sub(r" opts=\w+", "", other.replace(f" [{LEVEL}]", ""))  # one live option set per method
            name = name.replace(SUFFIX[group], "") if group == "prune+recover" else name
            found.setdefault(name, {})[group] = (row, sign)
    for name, groups in found.items():
        if name in STAGES:
            continue
        cells = []
        for group in ("prune-only", "prune+recover"):
            if group in groups:
                row, sign = groups[group]
                cells += [flipped(row, sign), p_text(row.p_exact), p_text(row.p_holm)]
            else:
                cells += ["—", "—", "—"]
        print(f"| {name} | " + " | ".join(cells) + " |")


def stages(task: str, scores: pd.DataFrame, comps: pd.DataFrame) -> None:
    print(f"\n**{task_label(task)}**, the stages in prune-only ({LEVEL}; Δ = later stage − earlier, paired by seed)\n")
    print("| from | to | Δ [95% CI] | p exact | p Holm |\n|---|---|---|---|---|")
    for a, b in ((STAGES[0], STAGES[1]), (STAGES[1], STAGES[2]), (STAGES[0], STAGES[2])):
        match = [(row, sign) for other, row, sign in pairs_with(task, b, comps, "prune-only")
                 if other == f"{a} [{LEVEL}]"]
        if not match:
            print(f"| {a} | {b} | not in the report | — | — |")
            continue
        row, sign = match[0]
        print(f"| {a} | {b} | {flipped(row, sign)} | {p_text(row.p_exact)} | {p_text(row.p_holm)} |")


def span(values: list[float]) -> str:
    return (f"median {statistics.median(values):.0f} s, {min(values):.0f}-{max(values):.0f} s"
            if values else "no records")


def costs(folder: Path) -> None:
    records = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines() if line.strip()]
    records = [r for r in records if r["budget"].get("spec") == LEVEL and r["method"] in STAGES
               and r["task"] in TASKS]
    print(f"\nCost per cell at {LEVEL} (wall seconds, one thread; the records' `cost` and `trace`)\n")
    for task in TASKS:
        mine = [r for r in records if r["task"] == task]
        prune = [r for r in mine if r["method"] == "kwon" and r["condition"] == "prune-only"]
        timings = [r["trace"].get("timings", {}) for r in prune]
        recover = [r["cost"]["wall_s"] for r in mine if r["method"] == "kwon" and r["condition"] == "prune+recover"]
        tune = [r["trace"].get("tune", {}) for r in prune]
        stopped = sum(1 for t in tune if t.get("stopped_at_layer") is not None)
        moved = [r["trace"].get("rearrange", {}).get("heads_moved", 0) for r in prune]
        flops = [r["trace"]["flops"]["removed_share"] for r in prune if "flops" in r["trace"]]
        lengths = [r["trace"]["flops"]["seq_len"] for r in prune if "flops" in r["trace"]]
        print(f"- {task_label(task)} ({len(prune)} seeds): kwon's prune step "
              f"{span([r['cost']['prune_wall_s'] for r in prune])} (Fisher and search "
              f"{span([t['fisher_search_wall_s'] for t in timings if 'fisher_search_wall_s' in t])}; tuning "
              f"{span([t['tune_wall_s'] for t in timings if 'tune_wall_s' in t])}); recovery {span(recover)}; "
              + "; ".join(f"{m}'s prune step " + span([r["cost"]["prune_wall_s"] for r in mine
                                                       if r["method"] == m and r["condition"] == "prune-only"])
                          for m in STAGES[:2])
              + f". The rearrangement moved {min(moved, default=0)}-{max(moved, default=0)} heads (mean "
              f"{statistics.mean(moved) if moved else 0:.1f}); the tuning stopped early on {stopped} of {len(tune)} "
              f"seeds; the mask removes {100 * min(flops, default=0):.2f}-{100 * max(flops, default=0):.2f}% of "
              f"the forward FLOPs at the Fisher sample's mean length ({min(lengths, default=0)}-"
              f"{max(lengths, default=0)} tokens).")


def main(report: Path, folder: Path) -> None:
    scores, comps = read(report)
    for task in TASKS:
        rows_at_level(task, scores, comps)
        kwon_pairs(task, comps)
        stages(task, scores, comps)
    costs(folder)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--folder", type=Path, default=Path(__file__).parent,
                        help="the run folder whose records.jsonl gives the costs (default: this script's folder)")
    args = parser.parse_args()
    main(args.report, args.folder)
