"""Per-task plots of score against the fraction of heads pruned (prune-only beside prune+recover) and of which heads
the methods prune (stability of a method's head set across seeds, agreement between methods), PNG and PDF."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from headprune_bench.benchmark.report.plots import (
    MARKER_CYCLE,
    new_figure,
    panel_grid,
    point_labels,
    save_figure,
    second_option_sets,
)
from headprune_bench.benchmark.report.units import (
    Unit,
    method_color,
    method_rank,
    short_budget,
    sorted_methods,
    task_label,
)
from headprune_bench.benchmark.store.records import (
    CONTROL_NAME,
    METRIC_AXIS,
    ORIGINAL,
    PRUNE_ONLY,
    RECOVER,
    is_repair_condition,
    repair_of,
)

_STYLE = {"font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
          "legend.fontsize": 7, "axes.spines.top": False, "axes.spines.right": False, "pdf.fonttype": 42}
_PANELS = ((PRUNE_ONLY, ORIGINAL, "prune-only: mask on the base weights"),
           (RECOVER, CONTROL_NAME, "prune+recover: masked model re-fine-tuned;\ncontrol = unpruned, same fine-tune"))
_GREY = "#555555"


def _opts(value) -> str:
    return value if isinstance(value, str) else ""


def _base(name: str) -> str:
    """The method of a row name (``voita opts=HASH`` -> ``voita``)."""
    return name.partition(" opts=")[0]


def _short(name: str) -> str:
    """A row name as the plots print it: an option-set hash cut to 6 hex digits, as in the curves' legend."""
    base, _, opts = name.partition(" opts=")
    return f"{base} opts={opts[:6]}" if opts else base


def _ordered(names) -> list[str]:
    """Row names once each, in the report's method order, a method's option sets together."""
    return sorted(set(names), key=lambda n: (method_rank(_base(n)), n))


def _style_of(names: list[str], colors: dict[str, str], markers: dict[str, str]) -> dict[str, tuple[str, str]]:
    """(colour, marker) per row name, from the caller's dicts, else the report's defaults; a method's option sets
    (``name opts=HASH``) share its style."""
    bases = sorted_methods([_base(n) for n in names])
    style = {b: (colors.get(b) or method_color(b, bases), markers.get(b) or MARKER_CYCLE[i % len(MARKER_CYCLE)])
             for i, b in enumerate(bases)}
    return {n: (colors.get(n) or style[_base(n)][0], markers.get(n) or style[_base(n)][1]) for n in names}


def _first(values) -> float:
    finite = [float(v) for v in values if pd.notna(v) and np.isfinite(v)]
    return finite[0] if finite else math.nan


def _percent_axis(ax, label: str) -> None:
    from matplotlib.ticker import PercentFormatter

    ax.set_xlim(-0.04, 1.04)
    ax.set_xticks(np.linspace(0, 1, 6))
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))
    ax.set_xlabel(label)
    ax.grid(linewidth=0.3, alpha=0.6)


def _line(ax, rows: pd.DataFrame, start: float, color: str, marker: str, second_set: bool, label: str,
          alpha: float):
    """A method's mean score over its levels from (0, ``start``), with its 95% CI band; returns the line."""
    rows = rows.sort_values("level")
    x, y = rows["level"].to_numpy(float), 100 * rows["mean"].to_numpy(float)
    if np.isfinite(start):
        x, y = np.r_[0.0, x], np.r_[100 * start, y]
    face = "white" if second_set else color
    line = ax.plot(x, y, color=color, marker=marker, markersize=4, linewidth=1.4, markerfacecolor=face,
                   markeredgecolor=color, linestyle=":" if second_set else "-", label=label, zorder=3,
                   markevery=slice(1 if np.isfinite(start) else 0, None))[0]
    lo, hi = 100 * rows.ci_low.to_numpy(float), 100 * rows.ci_high.to_numpy(float)
    if np.isfinite(lo).any():
        ax.fill_between(rows["level"].to_numpy(float), lo, hi, color=color, alpha=alpha, linewidth=0,
                        label=f"_{label} band", zorder=2)
    return line


def _err(center: float, low: float, high: float, scale: float = 1.0):
    if not (np.isfinite(low) and np.isfinite(high)):
        return None
    return [[scale * max(center - low, 0.0)], [scale * max(high - center, 0.0)]]


def _point(ax, row, color: str, marker: str, label: str):
    """A method that picks its own count: mean level and score with 95% CIs on both axes."""
    return ax.errorbar(row.level, 100 * row.mean, xerr=_err(row.level, row.level_ci_low, row.level_ci_high),
                       yerr=_err(row.mean, row.ci_low, row.ci_high, 100), fmt=marker, markersize=5, color=color,
                       markeredgecolor="black", markeredgewidth=0.6, elinewidth=1.2, capsize=2.5, label=label,
                       zorder=4)


def _labels(units: list[Unit], budgets: bool) -> dict[Unit, str]:
    return point_labels(units, budgets=budgets, conditions=False) if units else {}


def _units(rows: pd.DataFrame) -> tuple[dict[Unit, pd.DataFrame], dict[Unit, tuple]]:
    """The curve units (method, options; their level rows) and the point units (one row each) of ``rows``."""
    groups = {(m, _opts(o)): g for (m, o), g in rows[rows.kind == "curve"].groupby(
        ["method", rows.opts.map(_opts)], sort=False)}
    lines = {Unit(m, m, "", "", o or None): g for (m, o), g in groups.items()}
    points = {Unit(r.method, r.method, r.budget, "", _opts(r.opts) or None): r
              for r in rows[rows.kind == "point"].itertuples()}
    return lines, points


def _methods_panel(ax, rows: pd.DataFrame, start: float, style: dict, second: set, labels: dict,
                   handles: dict) -> list[float]:
    """The curve and point rows of one condition, labelled by ``labels`` (one per unit over both panels, so a
    line keeps its label in each); returns the scores drawn (x 100)."""
    lines, points = _units(rows)
    names = sorted_methods([u.name for u in [*lines, *points]])
    for u in sorted(lines, key=lambda u: (names.index(u.name), (u.name, u.opts) in second, u.opts or "")):
        color, marker = style[u.name]
        handles.setdefault(labels[u], _line(ax, lines[u], start, color, marker, (u.name, u.opts) in second,
                                            labels[u], 0.15 if len(lines) <= 4 else 0.08))
    for u in sorted(points, key=lambda u: (names.index(u.name), u.opts or "")):
        handles.setdefault(labels[u], _point(ax, points[u], *style[u.name], labels[u]))
    return [100 * v for c in ("mean", "ci_low", "ci_high") for v in rows[c]] + [100 * start]


def _reference(ax, value: float, color: str, linestyle: str, label: str, handles: dict) -> list[float]:
    if not np.isfinite(value):
        return []
    label = f"{label}: {100 * value:.1f}"
    handles.setdefault(label, ax.axhline(100 * value, color=color, linestyle=linestyle, linewidth=1.2, label=label,
                                         zorder=2.5))
    return [100 * value]


def _shared_ylim(axes, values: list[float]) -> None:
    finite = [v for v in values if np.isfinite(v)]
    if finite:
        lo, hi = min(finite), max(finite)
        pad = max(1.0, 0.08 * (hi - lo))
        for ax in axes:
            ax.set_ylim(lo - pad, hi + pad)


def _second_sets(names: pd.Series, opts: pd.Series) -> set[tuple[str, str]]:
    """:func:`second_option_sets` of rows with columns ``names`` (methods) and ``opts``."""
    return second_option_sets(zip(names, opts.map(_opts)))


def _seeds_note(rows: pd.DataFrame) -> str:
    n = sorted({int(v) for v in rows.n if pd.notna(v)})
    seeds = "n seeds" if not n else f"n = {n[0]} seeds" if len(n) == 1 else f"n = {n[0]}-{n[-1]} seeds"
    return f"bands: 95% t-CI over {seeds} (paired CIs in the tables)"


def repair_panels(rows: pd.DataFrame) -> list[str]:
    """The repair conditions of a task's curve rows, each a panel after prune-only and prune+recover."""
    return sorted(c for c in rows.condition.unique() if is_repair_condition(c))


def _curve_panels(fig, rows: pd.DataFrame, colors: dict, markers: dict) -> tuple[dict, dict]:
    """The panels of :func:`plot_curves`; returns the legend handles by label, of the methods and the references."""
    panels = [*_PANELS, *[(c, ORIGINAL, f"{c}: the prune-only mask,\nrepaired by {repair_of(c)}")
                          for c in repair_panels(rows)]]
    axes = fig.subplots(1, len(panels), sharey=True)
    style = _style_of([ORIGINAL, CONTROL_NAME, *rows.method.unique()], colors, markers)
    second, handles, refs, values = _second_sets(rows.method, rows.opts), {}, {}, []
    lines, points = _units(rows[rows.kind.isin(["curve", "point"])])
    labels = {**_labels(list(lines), False), **_labels(list(points), True)}
    starts = {name: _first(rows[rows.method == name]["mean"]) for name in (ORIGINAL, CONTROL_NAME)}
    for ax, (condition, start_row, title) in zip(axes, panels):
        cells = rows[(rows.condition == condition) & rows.kind.isin(["curve", "point"])]
        if cells.empty:
            ax.text(0.5, 0.5, f"no {condition} cells", transform=ax.transAxes, ha="center", va="center",
                    color=_GREY)
        else:
            values += _methods_panel(ax, cells, starts[start_row], style, second, labels, handles)
            ax.plot(0, 100 * starts[start_row], linestyle="none", marker="o", markersize=4.5,
                    color=style[start_row][0], zorder=4, label="_start")
        ax.set_title(title, loc="left")
        _percent_axis(ax, "fraction of heads pruned")
        values += _reference(ax, starts[ORIGINAL], style[ORIGINAL][0], "--", "unpruned (original)", refs)
    values += _reference(axes[1], starts[CONTROL_NAME], style[CONTROL_NAME][0], "-.",
                         "control", refs)
    for ax in axes:
        values += _reference(ax, _first(rows.majority), _GREY, ":", "majority class", refs)
    metric = rows.metric.iloc[0]
    axes[0].set_ylabel(METRIC_AXIS.get(metric, str(metric)))
    _shared_ylim(axes, values)
    return handles, refs


def _legend(fig, methods: dict, refs: dict) -> None:
    """One legend below the panels, filled row by row: the methods, then (on a new row) the reference lines."""
    from matplotlib.lines import Line2D

    ncol = max(len(refs), min(4, len(methods)), 1)
    entries = list(methods.items())
    entries += [("", Line2D([], [], linestyle="none"))] * (-len(entries) % ncol) + list(refs.items())
    nrows = math.ceil(len(entries) / ncol)
    # matplotlib fills a legend column by column
    order = [entries[r * ncol + c] for c in range(ncol) for r in range(nrows) if r * ncol + c < len(entries)]
    fig.legend([h for _, h in order], [t for t, _ in order], loc="outside lower center", ncol=ncol, frameon=False)


def plot_curves(curves: pd.DataFrame, task: str, folder: Path, colors: dict[str, str],
                markers: dict[str, str]) -> list[Path]:
    """Score (x 100) vs fraction of heads pruned for ``task``: prune-only left, prune+recover next, then one panel
    per repair condition (against the original, as prune-only), each method's
    line starting at its panel's unpruned score, 95% CI bands, own-count methods as points with CIs on both axes.

    ``colors``/``markers`` are keyed by row name (``original``, ``control``, methods). Writes ``curve_<task>.png``
    and ``.pdf`` into ``folder``; returns their paths, or [] (nothing written) when ``task`` has no rows.
    """
    import matplotlib

    rows = curves[curves.task == task]
    if rows.empty:
        return []
    with matplotlib.rc_context(_STYLE):
        fig = new_figure(7.0 + 3.2 * len(repair_panels(rows)), 3.6)
        top, bottom = fig.subfigures(2, 1, height_ratios=[3.45, 0.15])
        _legend(top, *_curve_panels(top, rows, colors, markers))
        fig.suptitle(f"{task_label(task)}: score vs fraction of heads pruned (mean over seeds)", fontsize=9)
        bottom.text(0.5, 0.5, _seeds_note(rows[rows.kind != "reference"]), ha="center", va="center", fontsize=6.5,
                    color=_GREY)
        return save_figure(fig, folder, f"curve_{task}")


def _stability_panel(ax, stability: pd.DataFrame, style: dict) -> None:
    """Mean pairwise Jaccard across seeds vs level per method; the random expectation dashed grey."""
    opts = stability.method.map(lambda n: n.partition(" opts=")[2])
    second = _second_sets(stability.method.map(_base), opts)
    for name in _ordered(stability.method):
        rows = stability[stability.method == name].sort_values("level")
        color, marker = style[name]
        dotted = (_base(name), name.partition(" opts=")[2]) in second
        ax.plot(rows["level"], rows.jaccard, color=color, marker=marker, markersize=4, linewidth=1.4,
                label=_short(name), linestyle=":" if dotted else "-", markerfacecolor="white" if dotted else color)
    chance = stability.sort_values("level").drop_duplicates("level")
    ax.plot(chance["level"], chance.random_expected, color="#777777", linestyle="--", linewidth=1.2,
            label="expected for random sets")
    ax.set_ylim(0, 1.05)
    ax.set_yticks(np.linspace(0, 1, 6))
    _percent_axis(ax, "fraction of heads pruned")
    ax.set_ylabel("mean pairwise Jaccard")


def _agreement_matrix(rows: pd.DataFrame, names: list[str]) -> np.ndarray:
    matrix = np.full((len(names), len(names)), np.nan)
    for r in rows.itertuples():
        matrix[names.index(r.method_a), names.index(r.method_b)] = r.jaccard
    np.fill_diagonal(matrix, np.nan)
    return matrix


def _heatmap(ax, names: list[str], matrix: np.ndarray, cmap):
    """One level's method x method Jaccard, each value printed in black or white by the cell's lightness."""
    image = ax.imshow(np.ma.masked_invalid(matrix), vmin=0, vmax=1, cmap=cmap, interpolation="nearest")
    for (i, j), value in np.ndenumerate(matrix):
        if np.isfinite(value):
            r, g, b, _ = cmap(value)
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6 if len(names) <= 4 else 5,
                    color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
    labels = [_short(n) for n in names]
    ax.set_xticks(range(len(names)), labels, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(len(names)), labels)
    ax.tick_params(length=0)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    return image


def _level_title(budget: str, level: float, n) -> str:
    kind = str(budget).partition(":")[0]
    text = f"{level:.0%} pruned" if kind == "fraction" else f"{short_budget(budget) or budget}, {level:.0%}"
    ns = sorted({int(v) for v in n if pd.notna(v)})
    return text + (f" (n = {ns[0]})" if len(ns) == 1 else f" (n = {ns[0]}-{ns[-1]})" if ns else "")


def _agreement_panels(subfig, agreement: pd.DataFrame, ncols: int) -> None:
    """Small multiples, one heatmap per budget (by level), shared 0..1 colour scale, one colour bar."""
    import matplotlib

    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#DDDDDD")
    order = agreement.groupby("budget")["level"].mean().sort_values()
    names = _ordered([*agreement.method_a, *agreement.method_b])
    axes = panel_grid(subfig, len(order), ncols, sharex=True, sharey=True)
    image = None
    for ax, (budget, level) in zip(axes.flat, order.items()):
        rows = agreement[agreement.budget == budget]
        image = _heatmap(ax, names, _agreement_matrix(rows, names), cmap)
        ax.set_title(_level_title(budget, level, rows.n), fontsize=7)
    subfig.colorbar(image, ax=axes, shrink=0.7 if len(axes) == 1 else 0.9, label="mean Jaccard")
    subfig.suptitle("agreement: two methods, same seed (grey: diagonal or not run)", fontsize=8)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color=_GREY)
    ax.set_axis_off()


def _atlas_layout(agreement: pd.DataFrame) -> tuple[bool, int, float, float]:
    """(stability above the heatmaps rather than beside them, heatmap columns, figure height, width share of the
    stability panel); a heatmap cell is about 0.24 inch so that its printed value fits."""
    levels = max(1, agreement.budget.nunique())
    side = max(0.85, 0.24 * len(set(agreement.method_a) | set(agreement.method_b)))
    if 3 * (side + 0.1) <= 3.4 or levels * (side + 0.1) <= 3.4:
        ncols = min(levels, 3)
        return False, ncols, max(2.9, 0.9 + math.ceil(levels / ncols) * (side + 0.75)), 2.6 / 7.0
    ncols = min(levels, max(1, int(5.6 // (side + 0.1))))
    return True, ncols, 2.8 + math.ceil(levels / ncols) * (side + 0.8), 2.6


def _stability_figure(sub, stab: pd.DataFrame, colors: dict[str, str], stacked: bool) -> None:
    ax = sub.subplots()
    if stab.empty:
        _empty(ax, "no stability rows")
    else:
        _stability_panel(ax, stab, _style_of([ORIGINAL, CONTROL_NAME, *stab.method.unique()], colors, {}))
        sub.legend(loc="outside right center" if stacked else "outside lower center", frameon=False,
                   ncol=1 if stacked or stab.method.nunique() < 4 else 2)
    sub.suptitle("stability: one method, seeds compared", fontsize=8)


def plot_atlas(stability: pd.DataFrame, agreement: pd.DataFrame, task: str, folder: Path,
               colors: dict[str, str]) -> list[Path]:
    """Which heads the methods prune on ``task``: each method's mean pairwise Jaccard of its pruned sets across seeds
    vs level (random expectation dashed), and one method x method Jaccard heatmap per level (same seed).

    Writes ``atlas_<task>.png`` and ``.pdf`` into ``folder``; returns their paths, or [] (nothing written) when
    neither frame has rows for ``task``.
    """
    import matplotlib

    stab, agr = stability[stability.task == task], agreement[agreement.task == task]
    if stab.empty and agr.empty:
        return []
    stacked, ncols, height, share = _atlas_layout(agr)
    with matplotlib.rc_context(_STYLE):
        fig = new_figure(7.0, height)
        if stacked:
            first, second = fig.subfigures(2, 1, height_ratios=[share, height - share])
        else:
            first, second = fig.subfigures(1, 2, width_ratios=[share, 1 - share], wspace=0.02)
        _stability_figure(first, stab, colors, stacked)
        if agr.empty:
            _empty(second.subplots(), "no agreement rows")
        else:
            _agreement_panels(second, agr, ncols)
        fig.suptitle(f"which heads do the methods prune? {task_label(task)}", fontsize=9)
        # the heatmaps' fixed aspect can leave their longest label past the left edge of a constrained layout
        return save_figure(fig, folder, f"atlas_{task}", tight=True)
