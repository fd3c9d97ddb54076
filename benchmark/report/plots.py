"""Plots of the report, PNG (200 dpi) and PDF (byte-identical for the same records).

Scores are percent points (MCC x 100); error bars are Student-t 95% CIs of the mean over seeds. A method keeps
one colour (:func:`~headprune_bench.benchmark.report.units.method_color`) and one marker in every plot; labels
come from :func:`point_labels`.
"""
from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from headprune_bench.benchmark.report.analysis import GroupResult, base_failed_seeds
from headprune_bench.benchmark.report.load import RunData, warn
from headprune_bench.benchmark.report.tables import num
from headprune_bench.benchmark.report.units import (
    Unit,
    method_color,
    short_budget,
    sorted_methods,
    sorted_units,
    task_key,
    task_label,
)
from headprune_bench.benchmark.store.records import (
    CONTROL,
    CONTROL_NAME,
    METRIC_AXIS,
    ORIGINAL,
    OWN,
    OWN_BUDGET,
    PRUNE_ONLY,
    RECOVER,
)

MARKER_CYCLE = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
_RC = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
       "legend.fontsize": 7, "axes.spines.top": False, "axes.spines.right": False, "pdf.fonttype": 42}
_REFERENCE_LINES = ((ORIGINAL, "--"), (CONTROL_NAME, "-."))
CONDITION_WORDS = {PRUNE_ONLY: "prune-only", RECOVER: "+recover", CONTROL: "control", OWN: "own weights"}
"""What a plot label adds for a unit's condition where a panel mixes conditions."""


def palette(data: RunData) -> tuple[dict[str, str], dict[str, str]]:
    """(colour, marker) per row name of ``data`` (methods in report order)."""
    names = sorted_methods([u.name for u in data.frame.unit]) if not data.frame.empty else []
    return ({n: method_color(n, names) for n in names},
            {n: MARKER_CYCLE[i % len(MARKER_CYCLE)] for i, n in enumerate(names)})


def save_figure(fig, folder: Path, name: str, tight: bool = False) -> list[Path]:
    """``fig`` as ``folder/name.png`` (200 dpi) and ``folder/name.pdf``; returns the two paths. ``tight``: the saved
    page is cut to what is drawn (0.05 inch around it), so that nothing the layout pushed past an edge is lost."""
    out = []
    bbox = {"bbox_inches": "tight", "pad_inches": 0.05} if tight else {}
    for ext in ("png", "pdf"):
        path = folder / f"{name}.{ext}"
        # no creation date: the same records give a byte-identical PDF
        fig.savefig(path, dpi=200 if ext == "png" else None, metadata={"CreationDate": None} if ext == "pdf" else None,
                    **bbox)
        out.append(path)
    return out


def new_figure(width: float, height: float):
    """A constrained-layout matplotlib figure, ``width`` x ``height`` inches, outside pyplot's state."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _stem(kind: str, r: GroupResult) -> str:
    return f"{kind}_{r.task}" + ("" if r.group == PRUNE_ONLY else "_recover")


def _title(r: GroupResult) -> str:
    return task_label(r.task) + ("" if r.group == PRUNE_ONLY else " (prune + recover)")


def _budget_text(spec: str) -> str:
    if spec == OWN_BUDGET or spec.startswith(OWN_BUDGET + "/"):
        return "own count" + spec[len(OWN_BUDGET):]
    return short_budget(spec)


def _two_option_sets(units: Sequence[Unit]) -> set[str]:
    """The methods of which ``units`` hold two or more option sets."""
    sets: dict[str, set[str]] = {}
    for u in units:
        sets.setdefault(u.name, set()).add(u.opts or "")
    return {name for name, opts in sets.items() if len(opts) > 1}


def second_option_sets(rows: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """(method, opts) of every option set but each method's main one, given one (method, opts) per row drawn; the
    main set is the one in most rows, then the first by hash. Plots draw the others dotted with open markers."""
    counts = Counter(rows)
    main, second = set(), set()
    for method, opts in sorted(counts, key=lambda k: (k[0], -counts[k], k[1])):
        if method in main:
            second.add((method, opts))
        main.add(method)
    return second


def point_labels(units: Sequence[Unit], sep: str = " ", budgets: bool = True,
                 conditions: bool = True) -> dict[Unit, str]:
    """One label per unit drawn in one panel, distinct within the panel.

    A label is the method; its budget (``30%``, ``12 heads``, ``own count``) if ``budgets``; ``opts=`` and the
    first 6 hex digits of its option-set hash where ``units`` hold two option sets of that method; and, if
    ``conditions`` and ``units`` mix conditions, :data:`CONDITION_WORDS` of its condition. Parts are joined by
    ``sep``; with ``sep=" "`` a condition word not starting with ``+`` follows a comma (``voita 30%, own
    weights``, ``voita 30% +recover``). Units the rule leaves alike get :attr:`Unit.label`.
    """
    two_sets = _two_option_sets(units)
    mixed = conditions and len({u.condition for u in units}) > 1
    labels = {}
    for u in units:
        parts = [u.name]
        if budgets and _budget_text(u.budget):
            parts.append(_budget_text(u.budget))
        if u.name in two_sets and u.opts:
            parts.append(f"opts={u.opts[:6]}")
        text = sep.join(parts)
        if mixed:
            word = CONDITION_WORDS.get(u.condition, u.condition)
            text += (", " if sep == " " and not word.startswith("+") else sep) + word
        labels[u] = text
    texts = list(labels.values())
    return {u: t if texts.count(t) == 1 else u.label for u, t in labels.items()}


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
    """Each pruned unit's mean score with its 95% t CI and its seeds as dots; original, control and majority as
    lines. Returns the files written (none without a pruned row)."""
    bars = [u for u in r.units if u.name not in (ORIGINAL, CONTROL_NAME)]
    if not bars:
        return []
    # sizes in inches at 7 pt: a character 0.06 wide, a line 0.12 high
    ticks = point_labels(bars, sep="\n")
    lines = [line for t in ticks.values() for line in t.split("\n")]
    per_point = max(0.42, 0.06 * max(map(len, lines)))
    slanted = len(bars) > 6 or 1.2 + per_point * len(bars) > 7.0  # long rows: one-line labels, slanted 35 degrees
    if slanted:
        ticks = point_labels(bars)
        width = min(7.0, max(3.3, 1.2 + 0.42 * len(bars)))
        height = 2.5 + 0.035 * max(0, max(map(len, ticks.values())) - 16)
    else:
        width = max(3.3, 1.2 + per_point * len(bars))
        height = 2.5 + 0.12 * max(0, max(t.count("\n") + 1 for t in ticks.values()) - 3)
    fig = new_figure(width, height)
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
    if slanted:
        ax.set_xticks(x, [ticks[u] for u in bars], rotation=35, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticks(x, [ticks[u] for u in bars])
    ax.set_ylabel(METRIC_AXIS.get(r.metric, r.metric))
    n = len(r.seeds)
    fig.suptitle(f"{_title(r)}: mean ± 95% CI, n = {n} seed{'s' if n != 1 else ''}", fontsize=9)
    fig.legend(loc="outside lower center", frameon=False, ncol=3)
    ax.grid(axis="y", linewidth=0.3, alpha=0.6, zorder=0)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    return save_figure(fig, folder, _stem("scores", r))


def _sweep_lines(r: GroupResult) -> dict[tuple[str, str, str], list[Unit]]:
    """The pruned units of a table per (method, condition, options hash): one line each."""
    lines: dict[tuple[str, str, str], list[Unit]] = {}
    for u in r.units:
        if u.name not in (ORIGINAL, CONTROL_NAME):
            lines.setdefault((u.name, u.condition, u.opts or ""), []).append(u)
    return lines


def _sweep_line(ax, r: GroupResult, us: list[Unit], label: str, second_set: bool, color: str,
                marker: str) -> None:
    """One method's scores over its budgets (a point with its CI for a single budget), 95% t CI band."""
    cond = us[0].condition
    st = sorted((r.unit_stats[u] for u in us), key=lambda s: s.heads_pruned)
    x, y = np.array([s.heads_pruned for s in st]), np.array([s.mean for s in st])
    lo, hi = np.array([s.ci_low for s in st]), np.array([s.ci_high for s in st])
    # a second option set: dotted, hollow markers; own weights: black marker edges (as in the cost plot)
    face = {"markerfacecolor": "white" if second_set else color,
            **({"markeredgecolor": "black", "markeredgewidth": 0.8} if cond == OWN else {})}
    if len(st) == 1:
        err = None if not np.isfinite(lo[0]) else [[y[0] - lo[0]], [hi[0] - y[0]]]
        ax.errorbar(x, y, yerr=err, fmt=marker, markersize=3.5, color=color, elinewidth=0.8, capsize=2, label=label,
                    **face)
        return
    ax.plot(x, y, marker=marker, markersize=3.5, color=color, linewidth=1.2,
            linestyle=":" if second_set else "-" if cond != RECOVER else "--", label=label, **face)
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
    second = second_option_sets((name, opts) for (name, _cond, opts), us in lines.items() for _ in us)
    labels = point_labels([us[0] for us in lines.values()], budgets=False)
    for (name, _cond, opts), us in lines.items():
        _sweep_line(ax, r, us, labels[us[0]], (name, opts) in second, colors.get(name, "#888888"),
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
    base model failed are left out, as they are from every statistic (docs/protocol.md §6)."""
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
    """Heatmaps (layers x heads) of the fraction of seeds in which each head is pruned, one panel per (method,
    budget, option set). Returns the files written (none without masks)."""
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
    titles = point_labels([unit for unit, _, _ in panels], conditions=False)  # one mask serves every condition
    for ax, (unit, pruned, count) in zip(axes.flat, panels):
        image = ax.imshow(pruned, vmin=0, vmax=1, cmap="cividis", aspect="auto", interpolation="nearest")
        ax.set_title(f"{titles[unit]}\n{pruned.sum():.1f} heads, n = {count}", fontsize=7)
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
    """(unit, layer -> per-seed reward curves) for every unit of a task whose records trace per-layer rewards,
    leaving out a unit whose rewards equal an earlier unit's of its method, budget and option set (conditions
    that reuse one prune step)."""
    df = data.frame[data.frame.task == task]
    panels = []
    seen: dict[tuple, list[dict]] = {}
    for unit in sorted_units(df.unit.unique()):
        rows = df[df.unit == unit]
        curves: dict[int, list[np.ndarray]] = {}
        rewards: dict[tuple[int, int], tuple] = {}
        for seed, i in zip(rows.seed, rows.rec):
            layers = data.records[i].trace.get("layers")
            for j, entry in enumerate(layers if isinstance(layers, list) else ()):
                if isinstance(entry, dict) and entry.get("rewards"):
                    layer = int(entry.get("layer", j))
                    curves.setdefault(layer, []).append(np.asarray(entry["rewards"], float))
                    rewards[(seed, layer)] = tuple(entry["rewards"])
        same_prune = seen.setdefault((unit.name, unit.budget, unit.opts), [])
        if curves and rewards not in same_prune:
            same_prune.append(rewards)
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
    """AUBER's per-layer reward per episode (mean over seeds), from ``trace["layers"][i]["rewards"]``, one panel
    per prune step (see :func:`_reward_curves`). Returns the files written (none without such traces)."""
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
    titles = point_labels([unit for unit, _ in panels])
    for ax, (unit, curves) in zip(axes.flat, panels):
        for layer, runs in sorted(curves.items()):
            mean = _mean_curve(runs)
            ax.plot(np.arange(1, len(mean) + 1), mean, color=cmap(norm(layer)), linewidth=1)
        ax.set_title(f"{titles[unit]} (n = {max(len(v) for v in curves.values())})", fontsize=7)
        ax.set_xlabel("episode")
        ax.set_ylabel("reward")
        ax.grid(linewidth=0.3, alpha=0.6)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, label="layer", shrink=0.8,
                 ticks=all_layers if len(all_layers) <= 12 else None)
    fig.suptitle(f"{task_label(task)}: AUBER reward per episode, per layer (mean over seeds)", fontsize=9)
    return save_figure(fig, folder, f"auber_layers_{task}")


_COST_KEYS = {PRUNE_ONLY: "filled: prune-only", RECOVER: "open: +recover", OWN: "black edge: own weights"}


def _cost_fill(condition: str, color: str) -> dict[str, Any]:
    if condition == RECOVER:
        return {"mfc": "white"}
    if condition == OWN:
        return {"mfc": color, "mec": "black", "mew": 0.8}
    return {"mfc": color}


def _cost_points(ax, results: list[GroupResult], task: str, colors: dict[str, str], markers: dict[str, str],
                 handles: dict[str, Any]) -> set[str]:
    """One task's units as (wall s, mean score) points, tagged ``opts=HASH6`` where the panel holds two option sets
    of the method in the unit's condition; returns the conditions drawn."""
    drawn = [(r, u) for r in results if r.task == task for u in r.units
             if not (r.group == RECOVER and u.condition == PRUNE_ONLY)  # drawn from the prune-only table
             and np.isfinite(r.unit_stats[u].wall_s) and r.unit_stats[u].wall_s > 0]
    conditions = {u.condition for _, u in drawn}
    two_sets = {(c, n) for c in conditions for n in _two_option_sets([u for _, u in drawn if u.condition == c])}
    for r, u in drawn:
        s, col = r.unit_stats[u], colors.get(u.name, "#888888")
        h = ax.plot(s.wall_s, s.mean, linestyle="none", marker=markers.get(u.name, "o"), markersize=4, color=col,
                    **_cost_fill(u.condition, col))[0]
        if u.condition not in (RECOVER, OWN):
            handles.setdefault(u.name, h)
        if (u.condition, u.name) in two_sets and u.opts:
            ax.annotate(f"opts={u.opts[:6]}", (s.wall_s, s.mean), xytext=(3, 2), textcoords="offset points",
                        fontsize=5, color=col)
    return conditions


def plot_cost(results: list[GroupResult], folder: Path, colors: dict[str, str], markers: dict[str, str]) -> list[Path]:
    """Cost vs score: mean wall seconds per cell (log x) against the mean score over seeds, one panel per task
    with seeds; markers filled for prune-only, open for +recover, black-edged for own weights. Returns the files
    written."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    tasks = sorted({r.task for r in results if r.seeds}, key=task_key)
    if not tasks:
        return []
    ncols = min(4, len(tasks))
    fig = new_figure(min(7.0, 0.8 + 1.9 * ncols), 0.6 + 1.9 * math.ceil(len(tasks) / ncols))
    axes = panel_grid(fig, len(tasks), 4)
    handles: dict[str, Any] = {}
    conditions: set[str] = set()
    for ax, task in zip(axes.flat, tasks):
        conditions |= _cost_points(ax, results, task, colors, markers, handles)
        ax.set_xscale("log")
        lo, hi = ax.dataLim.intervalx
        wide = np.isfinite(lo) and lo > 0 and hi / lo > 30  # 1-2-5 ticks would collide over more decades
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.margins(x=0.12, y=0.12)
        ax.set_title(task_label(task))
        ax.set_xlabel("wall s per cell (log)")
        metric = next(r.metric for r in results if r.task == task)
        ax.set_ylabel(METRIC_AXIS.get(metric, metric))
        ax.grid(linewidth=0.3, alpha=0.6, which="both")
    if handles:
        names = sorted_methods(list(handles))
        fig.legend([handles[n] for n in names], names, loc="outside lower center", ncol=min(6, len(names)),
                   frameon=False)
    if conditions & {RECOVER, OWN}:
        keys = [(text, Line2D([], [], linestyle="none", marker="o", color="#999999", **_cost_fill(cond, "#999999")))
                for cond, text in _COST_KEYS.items() if cond in conditions]
        fig.legend([h for _, h in keys], [t for t, _ in keys], loc="outside upper center", ncol=len(keys),
                   frameon=False)
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
