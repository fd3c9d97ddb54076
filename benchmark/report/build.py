"""``build_report``: load, analyse, tabulate, plot, write. Every step is a call into one module of the package."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click
import pandas as pd

from headprune_bench.benchmark.report import cells, document, speed, tables  # submodules
from headprune_bench.benchmark.report.analysis import DEFAULT_AGAINST, GroupResult, analyse
from headprune_bench.benchmark.report.crosstask import cross_task_summary
from headprune_bench.benchmark.report.curve_plots import plot_atlas, plot_curves
from headprune_bench.benchmark.report.curves import CurveFrames, curve_frames, has_sweep
from headprune_bench.benchmark.report.families import families_frame
from headprune_bench.benchmark.report.findings import findings_markdown
from headprune_bench.benchmark.report.load import RunData, load_runs, warn
from headprune_bench.benchmark.report.matrix import family_rows, has_matrix, heatmap, matrix_frames
from headprune_bench.benchmark.report.plots import make_plots, palette
from headprune_bench.benchmark.report.provenance import ProvenanceReport
from headprune_bench.benchmark.store.records import CONTROL_NAME, ORIGINAL

FORMATS = ("md", "csv", "tex")
#: The curve CSVs of a folder with a sweep: file name -> :class:`CurveFrames` field.
CURVE_FILES = {"curves.csv": "curves", "auc.csv": "auc", "atlas_stability.csv": "stability",
               "atlas_agreement.csv": "agreement"}


def parse_list(value: str | Sequence[str] | None, default: Sequence[str]) -> tuple[str, ...]:
    """A comma-separated string or a sequence as lower-case names without blanks; ``default`` for None."""
    if value is None:
        return tuple(default)
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(x.strip().lower() for x in items if x and x.strip())


def compute_frames(data: RunData, results: list[GroupResult], plots_dir: Path | None, n_boot: int = 10_000,
                   seed: int = 0) -> document.Frames:
    """Everything beside the per-task tables (:class:`document.Frames`); the plots drawn into ``plots_dir``
    (none when it is None or there are no results); the curves when ``data`` holds a sweep."""
    missing = cells.missing_frame(data)
    frames = document.Frames(summary=cross_task_summary(results), comparisons=tables.comparisons_frame(results),
                             cost=cells.cost_frame(data), walls=cells.wall_per_seed(data, missing),
                             missing=missing, option_sets=cells.option_sets(data),
                             plots=make_plots(data, results, plots_dir) if plots_dir and results else [],
                             curves=curve_frames(data, n_boot=n_boot, seed=seed) if has_sweep(data) else None)
    frames.families = families_frame(results, frames.curves.auc if frames.curves is not None else None)
    if has_matrix(data.frame):
        frames.matrix = matrix_frames(data, frames.curves.auc if frames.curves is not None else None, n_boot, seed)
        frames.families = pd.concat([frames.families, family_rows(frames.matrix.tests)], ignore_index=True)
        if plots_dir:
            plots_dir.mkdir(parents=True, exist_ok=True)
            for task in dict.fromkeys([*frames.matrix.area.task, *frames.matrix.matrix.task]):
                frames.matrix_plots += heatmap(task, frames.matrix.area, frames.matrix.tests.to_dict("records"),
                                               plots_dir, frames.matrix.matrix)
    if plots_dir and results and frames.curves is not None:
        frames.plots = [*curve_plots_of(data, frames.curves, plots_dir), *frames.plots]
    frames.plots += frames.matrix_plots
    return frames


def curve_plots_of(data: RunData, curves: CurveFrames, folder: Path) -> list[Path]:
    """``curve_<task>`` and ``atlas_<task>`` (PNG and PDF) of every task with curve rows, drawn into ``folder``."""
    colors, markers = palette(data)
    paths: list[Path] = []
    for task in dict.fromkeys(curves.curves.task):
        paths += plot_curves(curves.curves, task, folder, colors, markers)
        paths += plot_atlas(curves.stability, curves.agreement, task, folder, colors)
    return paths


def write_csv(out_dir: Path, results: list[GroupResult], frames: document.Frames) -> None:
    """``scores.csv``, ``comparisons.csv``, ``summary.csv``, ``cost.csv``, ``wall_per_seed.csv``, ``missing.csv``,
    ``families.csv``, where a method ran with several option sets ``option_sets.csv``, for a sweep
    :data:`CURVE_FILES`, and with repair cells ``matrix.csv``, ``matrix_area.csv``, ``matrix_tests.csv``.

    Raises:
        OSError: a file cannot be written.
    """
    tables.scores_frame(results).to_csv(out_dir / "scores.csv", index=False)
    frames.comparisons.to_csv(out_dir / "comparisons.csv", index=False)
    tables.summary_numbers(frames.summary).to_csv(out_dir / "summary.csv", index=False)
    frames.cost.to_csv(out_dir / "cost.csv", index=False)
    frames.walls.to_csv(out_dir / "wall_per_seed.csv", index_label="method")
    frames.missing.to_csv(out_dir / "missing.csv", index=False)
    if frames.families is not None:
        frames.families.to_csv(out_dir / "families.csv", index=False)
    if not frames.option_sets.empty:
        frames.option_sets.to_csv(out_dir / "option_sets.csv", index=False)
    if frames.curves is not None:
        for name, frame in CURVE_FILES.items():
            getattr(frames.curves, frame).to_csv(out_dir / name, index=False)
    if frames.matrix is not None:
        frames.matrix.matrix.to_csv(out_dir / "matrix.csv", index=False)
        frames.matrix.area.to_csv(out_dir / "matrix_area.csv", index=False)
        frames.matrix.tests.to_csv(out_dir / "matrix_tests.csv", index=False)


def _warn_unknown_references(data: RunData, references: Sequence[str]) -> None:
    """Warn about each ``--against`` name that has no row in the records (a typo compares with nothing); the
    default references (:data:`DEFAULT_AGAINST`) are exempt, since most folders have no AUBER rows."""
    present = {r.method for r in data.records} | {ORIGINAL, CONTROL_NAME, "all"}
    for name in references:
        if name in DEFAULT_AGAINST:
            continue
        if name not in present:
            warn(f"--against {name}: no record of a method called {name!r} in these folders; nothing is compared "
                 f"with it (methods present: {', '.join(sorted(present - {'all'}))})")


def build_report(folders: Sequence[str | Path] | str | Path, against: Sequence[str] | str = DEFAULT_AGAINST,
                 formats: Sequence[str] | str = FORMATS, plots: bool = True, out: str | Path | None = None,
                 echo: bool = True, n_boot: int = 10_000, n_boot_examples: int = 1000, seed: int = 0) -> Path:
    """Build the report of one or more run folders; returns the report folder.

    Args:
        folders: run folder(s) holding ``records.jsonl`` (combined; duplicate cells kept once, warned).
        against: reference method names (``original``, ``auber``, any method) or ``"all"`` (every pair); a list
            or a comma-separated string.
        formats: any of ``md``, ``csv``, ``tex`` (list or comma-separated string).
        plots: write PNG and PDF plots to ``REPORT_DIR/plots``.
        out: report folder (default ``<first folder>/report``).
        echo: print the Markdown report.
        n_boot, n_boot_examples, seed: bootstrap replicates (seed level; two-level) and their RNG seed.

    Raises:
        FileNotFoundError: a run folder does not exist, or is not a run folder.
        ValueError: no folder, or an unknown format.
        OSError: the report folder cannot be written.
    """
    folders = [Path(f) for f in ([folders] if isinstance(folders, (str, Path)) else folders)]
    if not folders:
        raise ValueError("no run folder given")
    fmts = parse_list(formats, FORMATS)
    bad = sorted(set(fmts) - set(FORMATS))
    if bad:
        raise ValueError(f"unknown format(s) {', '.join(bad)}; known: {', '.join(FORMATS)}")
    references = parse_list(against, DEFAULT_AGAINST)
    out_dir = Path(out) if out is not None else folders[0] / "report"
    out_dir.mkdir(parents=True, exist_ok=True)

    data = load_runs(folders)
    _warn_unknown_references(data, references)
    results = analyse(data, against="all" if "all" in references else references, n_boot=n_boot,
                      n_boot_examples=n_boot_examples, seed=seed)
    frames = compute_frames(data, results, out_dir / "plots" if plots else None, n_boot=n_boot, seed=seed)
    rows = speed.speed_rows(data)
    profiles, speed_cells = speed.profile_frame(rows), speed.cell_frame(data, rows)
    if plots and not speed_cells.empty:
        frames.plots += speed.plot_score_vs_speedup(speed_cells, out_dir / "plots", palette(data)[0])
    row_costs = speed.row_cost_frame(data, speed_cells)
    prov = ProvenanceReport.of(data, results, frames.curves)
    text = document.markdown(data, results, frames, speed.speed_section(profiles, row_costs), prov.section())

    if "md" in fmts:
        (out_dir / "report.md").write_text(text, encoding="utf-8")
        curves = frames.curves
        (out_dir / "findings.md").write_text(findings_markdown(data, results, curves.auc if curves else None,
                                                               curves.curves if curves else None, prov.summary()),
                                             encoding="utf-8")
    if "csv" in fmts:
        write_csv(out_dir, results, frames)
        prov.write_csv(out_dir)
        if rows:
            profiles.to_csv(out_dir / "speed.csv", index=False)
            speed_cells.to_csv(out_dir / "speed_cells.csv", index=False)
            row_costs.to_csv(out_dir / "speed_rows.csv", index=False)
    if "tex" in fmts:
        (out_dir / "tables.tex").write_text(document.latex(results, frames), encoding="utf-8")
    if echo:
        click.echo(text)
        click.echo(f"report written to {out_dir}")
    return out_dir
