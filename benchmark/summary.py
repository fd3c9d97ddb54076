"""The end-of-run summary: task x method, the primary metric's mean +- sample SD over seeds, heads pruned,
beside the unpruned original and the majority-class baseline. Written to ``DIR/summary.md`` and
``DIR/summary.csv`` and printed. (Significance tests and plots belong to ``bench report``.)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from benchmark.store import RECORDS, read_jsonl

METRIC_SHORT = {"accuracy": "acc", "matthews_correlation": "MCC", "f1": "F1"}


def records_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per record with the scalar columns a table needs (scores in percent points)."""
    rows = []
    for r in records:
        row = {"task": r["task"], "seed": r["seed"], "method": r["method"], "condition": r["condition"],
               "budget": r["budget"]["spec"], "heads_pruned": r["heads_pruned"], "heads_total": r["heads_total"],
               "primary_metric": r["primary_metric"], "score": 100 * r["score"],
               "majority": 100 * r["majority_baseline"][r["primary_metric"]], "degenerate": r["degenerate"],
               "base_failed": r.get("base_failed", False), "wall_s": r["cost"]["wall_s"],
               "target": r["budget"].get("target")}
        for name, value in r["metrics"].items():
            row[f"metric:{name}"] = 100 * value
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """Task x (method, condition) table; mean and sample SD (ddof=1; NaN with one seed) over seeds.

    Columns: task, metric, method, condition, budget, n, mean, sd, heads_pruned (mean), off_budget (seeds whose
    pruned count differs from their target), degenerate (count), original (mean of the unpruned model), majority,
    wall_s (mean).
    """
    df = records_frame(records)
    if df.empty:
        return pd.DataFrame()
    out = []
    for (task, method, condition, budget), g in df.groupby(["task", "method", "condition", "budget"], sort=False):
        orig = df[(df.task == task) & (df.method == "original") & (df.condition == "prune-only")]
        out.append({
            "task": task, "metric": METRIC_SHORT.get(g.primary_metric.iloc[0], g.primary_metric.iloc[0]),
            "method": method, "condition": condition, "budget": budget, "n": len(g),
            "mean": g.score.mean(), "sd": g.score.std(ddof=1) if len(g) > 1 else float("nan"),
            "heads_pruned": g.heads_pruned.mean(), "heads_total": int(g.heads_total.iloc[0]),
            "off_budget": int((g.target.notna() & (g.heads_pruned != g.target)).sum()),
            "degenerate": int(g.degenerate.sum()), "original": orig.score.mean() if len(orig) else float("nan"),
            "majority": g.majority.iloc[0], "wall_s": g.wall_s.mean(),
        })
    table = pd.DataFrame(out)
    order = {"original": 0}
    table["_o"] = table.method.map(lambda m: order.get(m, 1))
    return table.sort_values(["task", "_o", "method", "condition"]).drop(columns="_o").reset_index(drop=True)


def _fmt(row: pd.Series) -> str:
    sd = "" if pd.isna(row["sd"]) else f" ± {row['sd']:.2f}"
    return f"{row['mean']:.2f}{sd}"


def markdown(table: pd.DataFrame) -> str:
    """The summary as a Markdown table (scores in percent points, mean ± sample SD over n seeds)."""
    if table.empty:
        return "(no finished cells)\n"
    view = pd.DataFrame({
        "task": table.task, "metric": table.metric, "method": table.method, "condition": table.condition,
        "budget": table.budget, "n": table.n, "score (mean ± SD)": table.apply(_fmt, axis=1),
        "heads pruned": table.apply(lambda r: f"{r.heads_pruned:.1f}/{r.heads_total}" + (
            f" ⚠ off budget on {r.off_budget}/{r.n} seeds" if r.off_budget else ""), axis=1),
        "degenerate": table.degenerate, "original": table.original.map(lambda v: f"{v:.2f}"),
        "majority": table.majority.map(lambda v: f"{v:.2f}"), "wall s": table.wall_s.map(lambda v: f"{v:.1f}"),
    })
    return view.to_markdown(index=False) + "\n"


def write_summary(folder: Path, header: str = "") -> pd.DataFrame:
    """Read ``folder/records.jsonl``, write ``summary.md`` and ``summary.csv``; returns the table."""
    folder = Path(folder)
    table = summarize(read_jsonl(folder / RECORDS))
    note = ("Scores in percent points (MCC x 100 for CoLA): mean ± sample SD over n seeds, on the GLUE dev split. "
            "WNLI's dev set is adversarial: compare it with its majority baseline, and keep it out of averages.\n")
    (folder / "summary.md").write_text((header + "\n\n" if header else "") + note + "\n" + markdown(table))
    table.to_csv(folder / "summary.csv", index=False)
    return table
