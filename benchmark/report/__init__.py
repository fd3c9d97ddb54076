"""``bench report``: significance tests, comparison tables and plots of one or more run folders.

:func:`load_runs` reads records into :class:`RunData`, :func:`analyse` computes each table's statistics, and
:func:`build_report` writes ``report.md``, the CSVs, ``tables.tex`` and ``plots/``; :func:`curve_frames` the curves of a
sweep. See docs/reports.md.
"""
from __future__ import annotations

from typing import Any

from headprune_bench.benchmark.report.analysis import Comparison, GroupResult, UnitStats, analyse
from headprune_bench.benchmark.report.build import build_report
from headprune_bench.benchmark.report.curves import CurveFrames, curve_frames, has_sweep
from headprune_bench.benchmark.report.load import ReportWarning, RunData, load_runs
from headprune_bench.benchmark.report.units import Unit, method_color, method_colors

__all__ = ["ReportWarning", "Unit", "RunData", "load_runs", "analyse", "build_report",
           "METHOD_COLORS", "method_color", "GroupResult", "UnitStats", "Comparison", "CurveFrames", "curve_frames",
           "has_sweep"]


def __getattr__(name: str) -> Any:
    """``METHOD_COLORS``: the fixed colours, read from the method registry when asked for."""
    if name == "METHOD_COLORS":
        return method_colors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
