"""Plots of the report, PNG (200 dpi) and PDF (no creation date: the same records give byte-identical files).

Scores are percent points (MCC x 100); score error bars are Student-t 95% CIs of the mean over seeds. Every
method has one colour (:func:`headprune_bench.benchmark.report.units.method_color`) and one marker in every plot.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headprune_bench.benchmark.report.analysis import GroupResult, base_failed_seeds
from headprune_bench.benchmark.report.load import RunData, warn
from headprune_bench.benchmark.report.tables import num
from headprune_bench.benchmark.report.units import (
    CONDITION_SUFFIX,
    Unit,
    method_color,
    short_budget,
    sorted_methods,
    sorted_units,
    task_key,
    task_label,
)
from headprune_bench.benchmark.store.records import CONTROL_NAME, METRIC_AXIS, ORIGINAL, PRUNE_ONLY, RECOVER

MARKER_CYCLE = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
_RC = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
       "legend.fontsize": 7, "axes.spines.top": False, "axes.spines.right": False, "pdf.fonttype": 42}
_REFERENCE_LINES = ((ORIGINAL, "--"), (CONTROL_NAME, "-."))


def palette(data: RunData) -> tuple[dict[str, str], dict[str, str]]:
    """(colour, marker) per row name of ``data`` (methods in report order)."""
    names = sorted_methods([u.name for u in data.frame.unit]) if not data.frame.empty else []
    return ({n: method_color(n, names) for n in names},
            {n: MARKER_CYCLE[i % len(MARKER_CYCLE)] for i, n in enumerate(names)})


def save_figure(fig, folder: Path, name: str) -> list[Path]:
    out = []
    for ext in ("png", "pdf"):
        path = folder / f"{name}.{ext}"
        # no creation date in the PDF: the same records give byte-identical plots (a rerun of the report diffs clean)
        fig.savefig(path, dpi=200 if ext == "png" else None, metadata={"CreationDate": None} if ext == "pdf" else None)
        out.append(path)
    return out


def new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _stem(kind: str, r: GroupResult) -> str:
    return f"{kind}_{r.task}" + ("" if r.group == PRUNE_ONLY else "_recover")


def _title(r: GroupResult) -> str:
    return task_label(r.task) + ("" if r.group == PRUNE_ONLY else " (prune + recover)")


def _tick(u: Unit, sep: str = "\n") -> str:
    parts = [u.name]  # the condition is in the figure's title
    if short_budget(u.budget):
        parts.append(short_budget(u.budget))
    if u.opts:
        parts.append(u.opts[:6])
    return sep.join(parts)


def _ylim(ax, values: list[float]) -> None:
    finite = [v for v in values if np.isfinite(v)]
    if finite:
        lo, hi = min(finite), max(finite)
        pad = max(1.0, 0.12 * (hi - lo))
        ax.set_ylim(min(lo - pad, 0) if lo - pad < 0 < hi else lo - pad, hi + pad)


def _score_points(ax, r: GroupResult, bars: list[Unit], colors: dict[str, str]) -> list[float]:
    """Each unit's mean with its CI and its seeds as dots; returns every value drawn."""
    values = []
    for i, u in enumerate(bars):
        s = r.unit_stats[u]
        err = None
        if np.isfinite(s.ci_low):
            err = [[s.mean - s.ci_low], [s.ci_high - s.mean]]
            values += [s.ci_low, s.ci_high]
        color = colors.get(u.name, "#888888")
        ax.errorbar(i, s.mean, yerr=err, fmt="o", markersize=6, color=color, markeredgecolor="black",
                    markeredgewidth=0.5, ecolor=color, elinewidth=1.2, capsize=3, zorder=3)
        pts = np.array(list(s.scores.values()))
        jitter = np.linspace(-0.12, 0.12, len(pts)) if len(pts) > 1 else np.zeros(1)
        ax.scatter(i + 0.25 + jitter, pts, s=7, color="white", edgecolor="black", linewidth=0.5, zorder=3)
        values += [s.mean, *pts]
    return values


def plot_scores(r: GroupResult, folder: Path, colors: dict[str, str]) -> list[Path]:
    """Each unit's mean score as a point with its 95% t CI and the seeds as small dots; original / control /
    majority as lines. Points rather than bars: the y-axis is zoomed to the scores, and a bar on a zoomed axis
    would draw its length (the score) out of proportion. Returns the files written (none without a pruned row)."""
    bars = [u for u in r.units if u.name not in (ORIGINAL, CONTROL_NAME)]
    if not bars:
        return []
    fig = new_figure(min(7.0, max(3.3, 1.2 + 0.42 * len(bars))), 2.5)
    ax = fig.add_subplot()
    values = _score_points(ax, r, bars, colors)
    for name, style in _REFERENCE_LINES:
        u = next((v for v in r.units if v.name == name), None)
        if u is not None and np.isfinite(r.unit_stats[u].mean):
            ax.axhline(r.unit_stats[u].mean, color=colors.get(name, "black"), linestyle=style, linewidth=1,
                       label=f"{name} ({num(r.unit_stats[u].mean)})", zorder=2.5)
            values.append(r.unit_stats[u].mean)
    if np.isfinite(r.majority):
        ax.axhline(r.majority, color="#555555", linestyle=":", linewidth=1.2, label=f"majority ({num(r.majority)})",
                   zorder=2.5)
        values.append(r.majority)
    _ylim(ax, values)
    x = np.arange(len(bars))
    if len(bars) > 6:  # long rows: one-line labels, slanted
        ax.set_xticks(x, [_tick(u, " ") for u in bars], rotation=35, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticks(x, [_tick(u) for u in bars])
    ax.set_ylabel(METRIC_AXIS.get(r.metric, r.metric))
    n = len(r.seeds)
    fig.suptitle(f"{_title(r)}: mean ± 95% CI, n = {n} seed{'s' if n != 1 else ''}", fontsize=9)
    fig.legend(loc="outside lower center", frameon=False, ncol=3)
    ax.grid(axis="y", linewidth=0.3, alpha=0.6, zorder=0)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    return save_figure(fig, folder, _stem("scores", r))


def _sweep_lines(r: GroupResult) -> dict[tuple[str, str, str], list[Unit]]:
    """The pruned units of a table per (method, condition, options hash): one line each, never joining two
    configurations."""
    lines: dict[tuple[str, str, str], list[Unit]] = {}
    for u in r.units:
        if u.name not in (ORIGINAL, CONTROL_NAME):
            lines.setdefault((u.name, u.condition, u.opts or ""), []).append(u)
    return lines


def _sweep_line(ax, r: GroupResult, key: tuple[str, str, str], us: list[Unit], second_set: bool, color: str,
                marker: str) -> None:
    """One method's scores over its budgets (a point with its CI for a single budget), 95% t CI band."""
    name, cond, opts = key
    st = sorted((r.unit_stats[u] for u in us), key=lambda s: s.heads_pruned)
    x, y = np.array([s.heads_pruned for s in st]), np.array([s.mean for s in st])
    lo, hi = np.array([s.ci_low for s in st]), np.array([s.ci_high for s in st])
    label = name + (f" opts={opts[:6]}" if opts else "") + CONDITION_SUFFIX.get(cond, "")
    face = "white" if second_set else color  # a second option set: dotted, hollow markers
    if len(st) == 1:
        err = None if not np.isfinite(lo[0]) else [[y[0] - lo[0]], [hi[0] - y[0]]]
        ax.errorbar(x, y, yerr=err, fmt=marker, markersize=3.5, color=color, elinewidth=0.8, capsize=2, label=label,
                    markerfacecolor=face)
        return
    ax.plot(x, y, marker=marker, markersize=3.5, color=color, linewidth=1.2,
            linestyle=":" if second_set else "-" if cond != RECOVER else "--", label=label, markerfacecolor=face)
    if np.isfinite(lo).any():
        ax.fill_between(x, lo, hi, color=color, alpha=0.18, linewidth=0)


def plot_sweep(r: GroupResult, folder: Path, colors: dict[str, str], markers: dict[str, str]) -> list[Path]:
    """Score vs heads pruned, one line per method (and option set) over its budgets, 95% t CI bands; only if a
    method has >= 2 budgets. Returns the files written."""
    lines = _sweep_lines(r)
    if not any(len(us) >= 2 for us in lines.values()):
        return []
    fig = new_figure(5.0, 2.6)
    ax = fig.add_subplot()
    sets_of: dict[str, list[str]] = {}
    for name, _cond, opts in lines:
        sets_of.setdefault(name, [])
        if opts not in sets_of[name]:
            sets_of[name].append(opts)
    for key, us in lines.items():
        name = key[0]
        _sweep_line(ax, r, key, us, sorted(sets_of[name]).index(key[2]) > 0, colors.get(name, "#888888"),
                    markers.get(name, "o"))
    for name, style in _REFERENCE_LINES:
        ref = next((u for u in r.units if u.name == name), None)
        if ref is not None:
            ax.axhline(r.unit_stats[ref].mean, color=colors.get(name, "black"), linestyle=style, linewidth=1,
                       label=name)
    if np.isfinite(r.majority):
        ax.axhline(r.majority, color="#555555", linestyle=":", linewidth=1.2, label="majority")
    total = int(r.heads_total) if np.isfinite(r.heads_total) else None
    ax.set_xlabel("heads pruned" + (f" (of {total})" if total else ""))
    ax.set_ylabel(METRIC_AXIS.get(r.metric, r.metric))
    fig.suptitle(f"{_title(r)}: score vs heads pruned (mean, 95% CI, n = {len(r.seeds)})", fontsize=9)
    fig.legend(loc="outside right center", frameon=False)
    ax.grid(linewidth=0.3, alpha=0.6)
    return save_figure(fig, folder, _stem("sweep", r))


def panel_grid(fig, n: int, max_cols: int, **kwargs: Any):
    """A grid of ``n`` panels, at most ``max_cols`` wide; the unused panels hidden."""
    ncols = min(max_cols, n)
    axes = fig.subplots(math.ceil(n / ncols), ncols, squeeze=False, **kwargs)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return axes


def _mask_panels(data: RunData, task: str) -> list[tuple[Unit, np.ndarray, int]]:
    """(unit, fraction of seeds pruning each head [L][H], seeds) per (method, budget, options) of a task; seeds whose
    base model failed are left out, as they are from every statistic (protocol.md §6)."""
    tdf = data.frame[data.frame.task == task]
    df = tdf[(tdf.method != ORIGINAL) & ~tdf.seed.isin(base_failed_seeds(tdf))]
    panels: dict[tuple, tuple[Unit, np.ndarray, int]] = {}
    for unit in sorted(sorted_units(df.unit.unique()), key=lambda u: u.condition != PRUNE_ONLY):
        key = (unit.name, unit.budget, unit.opts)
        if key in panels:  # the mask is held fixed under recovery: show each (method, budget) once
            continue
        masks = [np.asarray(m, dtype=float) for m in (data.records[i].mask for i in df[df.unit == unit].rec) if m]
        if not masks or len({m.shape for m in masks}) != 1:
            continue
        panels[key] = (unit, 1.0 - np.mean(masks, axis=0), len(masks))  # mask: 1 = kept, 0 = pruned
    return list(panels.values())


def plot_masks(data: RunData, task: str, folder: Path) -> list[Path]:
    """Heatmaps (layers x heads) of the fraction of seeds in which each head is pruned, one panel per unit.
    Returns the files written (none without masks)."""
    panels = _mask_panels(data, task)
    if not panels:
        return []
    n = len(panels)
    ncols, nrows = min(4, n), math.ceil(n / min(4, n))
    layers, heads = panels[0][1].shape
    panel_w = 1.6
    fig = new_figure(min(7.0, 0.6 + panel_w * ncols), 0.5 + nrows * max(1.3, panel_w * layers / max(heads, 1)))
    axes = panel_grid(fig, n, 4, sharex=True, sharey=True)
    image = None
    for ax, (unit, pruned, count) in zip(axes.flat, panels):
        image = ax.imshow(pruned, vmin=0, vmax=1, cmap="cividis", aspect="auto", interpolation="nearest")
        title = unit.name + (f" {short_budget(unit.budget)}" if short_budget(unit.budget) else "")
        ax.set_title(f"{title}\n{pruned.sum():.1f} heads, n = {count}", fontsize=7)
        ax.set_xticks(range(0, heads, 2 if heads > 8 else 1))
        ax.set_yticks(range(0, layers, 2 if layers > 8 else 1))
    for ax in axes[-1]:
        ax.set_xlabel("head")
    for ax in axes[:, 0]:
        ax.set_ylabel("layer")
    fig.colorbar(image, ax=axes, shrink=0.8, label="fraction of seeds pruned")
    fig.suptitle(f"{task_label(task)}: pruned heads", fontsize=9)
    return save_figure(fig, folder, f"masks_{task}")


def _reward_curves(data: RunData, task: str) -> list[tuple[Unit, dict[int, list[np.ndarray]]]]:
    """(unit, layer -> per-seed reward curves) for every unit of a task whose records trace per-layer rewards."""
    df = data.frame[data.frame.task == task]
    panels = []
    for unit in sorted_units(df.unit.unique()):
        curves: dict[int, list[np.ndarray]] = {}
        for i in df[df.unit == unit].rec:
            layers = data.records[i].trace.get("layers")
            for j, entry in enumerate(layers if isinstance(layers, list) else ()):
                if isinstance(entry, dict) and entry.get("rewards"):
                    curves.setdefault(int(entry.get("layer", j)), []).append(np.asarray(entry["rewards"], float))
        if curves:
            panels.append((unit, curves))
    return panels


def _mean_curve(runs: list[np.ndarray]) -> np.ndarray:
    """Mean over seeds per episode of curves of different lengths (NaN-padded)."""
    stack = np.full((len(runs), max(len(x) for x in runs)), np.nan)
    for k, x in enumerate(runs):
        stack[k, :len(x)] = x
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(stack, axis=0)


def plot_auber_layers(data: RunData, task: str, folder: Path) -> list[Path]:
    """AUBER's per-layer reward per episode (mean over seeds), from ``trace["layers"][i]["rewards"]``. Returns the
    files written (none without such traces)."""
    panels = _reward_curves(data, task)
    if not panels:
        return []
    import matplotlib
    from matplotlib import colors as mcolors
    from matplotlib.cm import ScalarMappable

    n = len(panels)
    ncols = min(3, n)
    fig = new_figure(min(7.0, 0.9 + 2.3 * ncols), 0.4 + 2.0 * math.ceil(n / ncols))
    axes = panel_grid(fig, n, 3)
    all_layers = sorted({layer for _, c in panels for layer in c})
    norm = mcolors.BoundaryNorm(np.arange(min(all_layers) - 0.5, max(all_layers) + 1.5), 256)
    cmap = matplotlib.colormaps["viridis"]
    for ax, (unit, curves) in zip(axes.flat, panels):
        for layer, runs in sorted(curves.items()):
            mean = _mean_curve(runs)
            ax.plot(np.arange(1, len(mean) + 1), mean, color=cmap(norm(layer)), linewidth=1)
        ax.set_title(f"{unit.label} (n = {max(len(v) for v in curves.values())})", fontsize=7)
        ax.set_xlabel("episode")
        ax.set_ylabel("reward")
        ax.grid(linewidth=0.3, alpha=0.6)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, label="layer", shrink=0.8,
                 ticks=all_layers if len(all_layers) <= 12 else None)
    fig.suptitle(f"{task_label(task)}: AUBER reward per episode, per layer (mean over seeds)", fontsize=9)
    return save_figure(fig, folder, f"auber_layers_{task}")


def _cost_points(ax, results: list[GroupResult], task: str, colors: dict[str, str], markers: dict[str, str],
                 handles: dict[str, Any]) -> bool:
    """One task's units as (wall s, mean score) points; returns whether a prune+recover unit was drawn."""
    recover = False
    for r in (x for x in results if x.task == task):
        for u in r.units:
            s = r.unit_stats[u]
            if (r.group == RECOVER and u.condition == PRUNE_ONLY) or not (np.isfinite(s.wall_s) and s.wall_s > 0):
                continue  # a prune-only unit of the recover table is drawn in the prune-only panel already
            col = colors.get(u.name, "#888888")
            h = ax.plot(s.wall_s, s.mean, linestyle="none", marker=markers.get(u.name, "o"), markersize=4,
                        color=col, mfc=col if u.condition != RECOVER else "white")[0]
            if u.condition != RECOVER:
                handles.setdefault(u.name, h)
            else:
                recover = True
    return recover


def plot_cost(results: list[GroupResult], folder: Path, colors: dict[str, str], markers: dict[str, str]) -> list[Path]:
    """Cost vs score: mean wall seconds per cell (log x) against the mean score over seeds, one panel per task;
    open markers for prune+recover units. Returns the files written."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    tasks = sorted({r.task for r in results}, key=task_key)
    if not tasks:
        return []
    ncols = min(4, len(tasks))
    fig = new_figure(min(7.0, 0.8 + 1.9 * ncols), 0.6 + 1.9 * math.ceil(len(tasks) / ncols))
    axes = panel_grid(fig, len(tasks), 4)
    handles: dict[str, Any] = {}
    recover = False
    for ax, task in zip(axes.flat, tasks):
        recover = _cost_points(ax, results, task, colors, markers, handles) or recover
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.12, y=0.12)
        ax.set_title(task.upper())
        ax.set_xlabel("wall s per cell (log)")
        metric = next(r.metric for r in results if r.task == task)
        ax.set_ylabel(METRIC_AXIS.get(metric, metric))
        ax.grid(linewidth=0.3, alpha=0.6, which="both")
    if recover:
        handles["open marker: +recover"] = Line2D([], [], linestyle="none", marker="o", color="black", mfc="white")
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="outside lower center",
                   ncol=min(6, len(handles)), frameon=False)
    return save_figure(fig, folder, "cost_vs_score")


def make_plots(data: RunData, results: list[GroupResult], folder: Path) -> list[Path]:
    """Every plot, PNG and PDF, into ``folder`` (created); a failing plot is warned about (:class:`ReportWarning`)
    and skipped. Returns the files written, in drawing order."""
    import matplotlib

    folder.mkdir(parents=True, exist_ok=True)
    colors, markers = palette(data)
    jobs: list[tuple[str, Callable[[], list[Path]]]] = []
    for r in results:
        if not r.seeds:  # every seed's base model failed: no statistic to draw
            continue
        jobs.append((f"scores {r.task} {r.group}", lambda r=r: plot_scores(r, folder, colors)))
        jobs.append((f"sweep {r.task} {r.group}", lambda r=r: plot_sweep(r, folder, colors, markers)))
    for task in sorted({r.task for r in results}, key=task_key):
        jobs.append((f"masks {task}", lambda t=task: plot_masks(data, t, folder)))
        jobs.append((f"auber layers {task}", lambda t=task: plot_auber_layers(data, t, folder)))
    jobs.append(("cost vs score", lambda: plot_cost(results, folder, colors, markers)))
    written: list[Path] = []
    with matplotlib.rc_context(_RC):
        for name, job in jobs:
            try:
                written += job()
            except Exception as exc:  # noqa: BLE001 - one bad plot must not lose the report
                warn(f"plot {name} failed: {type(exc).__name__}: {exc}")
    return written
