"""``bench report``: significance tests, comparison tables and plots of one or more run folders.

Input: run folders holding ``records.jsonl`` (one record per finished cell) and possibly ``failures.jsonl``.
Several folders are combined by concatenating their records; a cell key seen twice is kept once (the first
folder given wins) with a :class:`ReportWarning`.

Units of comparison: a *unit* is (method, budget spec, condition) - plus the method options hash when one
method ran with several option sets. The unpruned model in the ``control`` condition is the unit ``control``.
Units are paired by (task, seed); statistics come from :mod:`headprune_bench.benchmark.stats`.

Tables (one per task and condition group; layout of the AUBER paper's Table 2, transposed to one task at a
time): rows ``original`` then each unit; columns primary metric mean +- sample SD (percent points, MCC x 100),
n, heads pruned (mean), difference vs original with 95% bootstrap CI, exact sign-flip p Holm-adjusted within the
table, the same vs AUBER when AUBER ran (and vs ``control`` in the prune+recover group), degenerate counts.
Plus: statistics without degenerate / base-failed seeds (protocol.md §6), every comparison in long form with the
secondary tests and the two-level (seeds, then dev examples) bootstrap CI, a cross-task summary without WNLI
(WNLI beside its majority baseline), a cost table, and the missing / failed cells of a partially finished run.

Outputs in ``REPORT_DIR`` (default ``DIR/report`` of the first folder): ``report.md``, ``scores.csv``,
``comparisons.csv``, ``summary.csv``, ``cost.csv``, ``missing.csv``, ``tables.tex`` (booktabs; needs
``\\usepackage{booktabs}``) and ``plots/*.png|pdf``. The Markdown is also printed.

The package, computing apart from writing:

* :mod:`~headprune_bench.benchmark.report.units` - :class:`Unit` (a table row) and the order, names and colours of tasks, budgets
  and methods (methods' from the registry);
* :mod:`~headprune_bench.benchmark.report.load` - :func:`load_runs`: records (through :class:`headprune_bench.benchmark.store.records.Record`) into
  :class:`RunData` and its tidy frame (also the end-of-run summary's input);
* :mod:`~headprune_bench.benchmark.report.analysis` - :func:`analyse`: per (task, group) :class:`GroupResult` with its rows'
  statistics and comparisons, as dataclasses; :mod:`~headprune_bench.benchmark.report.crosstask` - the cross-task summary numbers;
  :mod:`~headprune_bench.benchmark.report.cells` - missing / failed cells, option sets, cost and wall seconds per cell;
* :mod:`~headprune_bench.benchmark.report.tables` - all of that as text (Markdown, LaTeX) and numeric (CSV) frames;
  :mod:`~headprune_bench.benchmark.report.document` - ``report.md`` and ``tables.tex``; :mod:`~headprune_bench.benchmark.report.plots` - plots;
* :mod:`~headprune_bench.benchmark.report.build` - :func:`build_report`. The ``bench report`` command is
  :func:`headprune_bench.benchmark.cli.report_cmd`.

Choices where the issue is silent are documented in the module that makes them (condition groups, reference
choice and ``--against all`` in :mod:`~headprune_bench.benchmark.report.analysis`, the averages in
:mod:`~headprune_bench.benchmark.report.crosstask`). Score error bars in plots are Student-t 95% CIs of the mean over seeds;
difference CIs are percentile bootstrap over seeds (protocol.md §5).
"""
from __future__ import annotations

from typing import Any

from headprune_bench.benchmark.report.analysis import Comparison, GroupResult, UnitStats, analyse
from headprune_bench.benchmark.report.build import build_report
from headprune_bench.benchmark.report.load import ReportWarning, RunData, load_runs
from headprune_bench.benchmark.report.units import Unit, method_color, method_colors

__all__ = ["ReportWarning", "Unit", "RunData", "load_runs", "analyse", "build_report",
           "METHOD_COLORS", "method_color", "GroupResult", "UnitStats", "Comparison"]


def __getattr__(name: str) -> Any:
    """``METHOD_COLORS``: the fixed colours, read from the method registry when asked for."""
    if name == "METHOD_COLORS":
        return method_colors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
