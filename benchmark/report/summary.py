"""The end-of-run summary (``DIR/summary.md``, ``DIR/summary.csv``, printed): task x method, the primary metric's
mean +- sample SD over seeds, heads pruned, beside the unpruned original and the majority-class baseline."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from headprune_bench.benchmark.report.load import load_runs, records_frame
from headprune_bench.benchmark.store.records import METRIC_LABEL, ORIGINAL, PRUNE_ONLY, Record


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Task x (method, condition, budget) table of a report frame (:data:`benchmark.report.load.FRAME_COLUMNS`);
    mean and sample SD (ddof=1; NaN with one seed) over seeds, in percent points.

    Columns: task, metric, method, condition, budget, n, mean, sd, heads_pruned (mean), heads_total, off_budget
    (seeds whose pruned count differs from their target), degenerate (count), original (mean of the unpruned
    model), majority, wall_s (mean). Empty for an empty frame.
    """
    if frame.empty:
        return pd.DataFrame()
    df = frame.assign(score=100 * frame.score, majority=100 * frame.majority)
    out = []
    for (task, method, condition, budget), g in df.groupby(["task", "method", "condition", "budget"], sort=False):
        orig = df[(df.task == task) & (df.method == ORIGINAL) & (df.condition == PRUNE_ONLY)]
        out.append({
            "task": task, "metric": METRIC_LABEL.get(g.metric.iloc[0], g.metric.iloc[0]),
            "method": method, "condition": condition, "budget": budget, "n": len(g),
            "mean": g.score.mean(), "sd": g.score.std(ddof=1) if len(g) > 1 else float("nan"),
            "heads_pruned": g.heads_pruned.mean(), "heads_total": int(g.heads_total.iloc[0]),
            "off_budget": int((g.target.notna() & (g.heads_pruned != g.target)).sum()),
            "degenerate": int(g.degenerate.sum()), "original": orig.score.mean() if len(orig) else float("nan"),
            "majority": g.majority.iloc[0], "wall_s": g.wall_s.mean(),
        })
    table = pd.DataFrame(out)
    table["_o"] = table.method.map(lambda m: 0 if m == ORIGINAL else 1)
    return table.sort_values(["task", "_o", "method", "condition"]).drop(columns="_o").reset_index(drop=True)


def summarize(records: Iterable[Record | dict[str, Any]]) -> pd.DataFrame:
    """:func:`summary_table` of ``records`` (dicts are read through :meth:`Record.from_dict`).

    Raises:
        ValueError: a dict that is not a record.
    """
    return summary_table(records_frame(records))


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
            f" ⚠ target missed on {r.off_budget}/{r.n} seeds" if r.off_budget else ""), axis=1),
        "degenerate": table.degenerate, "original": table.original.map(lambda v: f"{v:.2f}"),
        "majority": table.majority.map(lambda v: f"{v:.2f}"), "wall s": table.wall_s.map(lambda v: f"{v:.1f}"),
    })
    return view.to_markdown(index=False) + "\n"


def write_summary(folder: Path, header: str = "") -> pd.DataFrame:
    """Read the run folder ``folder`` (:func:`benchmark.report.load.load_runs`), write ``summary.md`` and
    ``summary.csv``; returns the table.

    Raises:
        FileNotFoundError: ``folder`` is not a run folder.
        OSError: the files cannot be written.
    """
    folder = Path(folder)
    table = summary_table(load_runs([folder]).frame)
    note = ("Scores in percent points (MCC x 100 for CoLA): mean ± sample SD over n seeds, on the GLUE dev split. "
            "WNLI's dev set is adversarial: compare it with its majority baseline, and keep it out of averages.\n")
    (folder / "summary.md").write_text((header + "\n\n" if header else "") + note + "\n" + markdown(table))
    table.to_csv(folder / "summary.csv", index=False)
    return table
