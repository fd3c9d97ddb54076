"""The score-vs-fraction curves and the head-set atlas (report/curve_plots.py), drawn from hand-made frames."""
from __future__ import annotations

import itertools

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402

from headprune_bench.benchmark.report import curve_plots  # noqa: E402

METHODS = ("michel", "voita", "random")
LEVELS = (0.1, 0.5, 0.9)
TASKS = {"mrpc": ("accuracy", 0.68), "cola": ("matthews_correlation", 0.0)}
COLORS = {"original": "#000000", "control": "#777777", "michel": "#56B4E9", "voita": "#009E73",
          "random": "#AAAAAA", "auber": "#D55E00"}
MARKERS = {"original": "o", "control": "s", "michel": "^", "voita": "D", "random": "v", "auber": "P"}


def _row(task, condition, method, budget, kind, level, mean, half, level_half=np.nan):
    metric, majority = TASKS[task]
    return {"task": task, "condition": condition, "method": method, "budget": budget, "opts": None, "kind": kind,
            "metric": metric, "n": 5, "level": level, "level_sd": 2 * level_half,
            "level_ci_low": level - level_half, "level_ci_high": level + level_half, "mean": mean, "sd": 2 * half,
            "ci_low": mean - half, "ci_high": mean + half, "majority": majority}


def curves_frame(tasks=("mrpc",)) -> pd.DataFrame:
    """Per task: original, control, 3 methods at 10/50/90% in both conditions, auber's own count in both."""
    rows = []
    for task in tasks:
        top = 0.84 if task == "mrpc" else 0.56
        rows += [_row(task, "prune-only", "original", "none", "reference", 0.0, top, 0.01),
                 _row(task, "control", "control", "none", "reference", 0.0, top + 0.01, 0.012)]
        for (k, method), level in itertools.product(enumerate(METHODS), LEVELS):
            drop = (0.15 + 0.1 * k) * level ** 2
            for condition, gain in (("prune-only", 0.0), ("prune+recover", 0.6)):
                rows.append(_row(task, condition, method, f"fraction:{level}", "curve", level,
                                 top - drop * (1 - gain), 0.01 + 0.03 * level))
        for condition, mean in (("prune-only", top - 0.05), ("prune+recover", top - 0.02)):
            rows.append(_row(task, condition, "auber", "own", "point", 0.42, mean, 0.02, 0.06))
    return pd.DataFrame(rows)


def atlas_frames(tasks=("mrpc",)) -> tuple[pd.DataFrame, pd.DataFrame]:
    stability, agreement = [], []
    for task, level in itertools.product(tasks, LEVELS):
        for k, method in enumerate(METHODS):
            stability.append({"task": task, "method": method, "budget": f"fraction:{level}", "level": level, "n": 5,
                              "jaccard": min(1.0, level + 0.3 - 0.15 * k), "random_expected": level / (2 - level)})
        for (i, a), (j, b) in itertools.permutations(enumerate(METHODS), 2):
            agreement.append({"task": task, "budget": f"fraction:{level}", "level": level, "method_a": a,
                              "method_b": b, "n": 5, "jaccard": round(0.1 * (i + j) + level / 2, 3)})
    return pd.DataFrame(stability), pd.DataFrame(agreement)


@pytest.fixture
def figures(monkeypatch):
    """Every figure the module saves, kept open for inspection (save_figure is wrapped)."""
    saved = []
    real = curve_plots.save_figure

    def keep(fig, folder, name, **kwargs):
        saved.append(fig)
        return real(fig, folder, name, **kwargs)

    monkeypatch.setattr(curve_plots, "save_figure", keep)
    return saved


def test_files_for_a_task_with_rows_and_none_for_a_task_without(tmp_path):
    stability, agreement = atlas_frames()
    paths = curve_plots.plot_curves(curves_frame(), "mrpc", tmp_path, COLORS, MARKERS)
    paths += curve_plots.plot_atlas(stability, agreement, "mrpc", tmp_path, COLORS)
    assert sorted(p.name for p in paths) == ["atlas_mrpc.pdf", "atlas_mrpc.png", "curve_mrpc.pdf", "curve_mrpc.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert curve_plots.plot_curves(curves_frame(), "rte", tmp_path, COLORS, MARKERS) == []
    assert curve_plots.plot_atlas(stability, agreement, "rte", tmp_path, COLORS) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


def test_pdfs_are_byte_identical_when_drawn_twice(tmp_path):
    stability, agreement = atlas_frames(("cola",))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        curve_plots.plot_curves(curves_frame(("cola",)), "cola", tmp_path / name, COLORS, MARKERS)
        curve_plots.plot_atlas(stability, agreement, "cola", tmp_path / name, COLORS)
    for stem in ("curve_cola.pdf", "atlas_cola.pdf"):
        assert (tmp_path / "a" / stem).read_bytes() == (tmp_path / "b" / stem).read_bytes()


def _line(ax, label):
    return next(line for line in ax.get_lines() if line.get_label() == label)


def test_curve_panels_share_y_and_each_line_starts_at_its_unpruned_score(tmp_path, figures):
    frame = curves_frame(("mrpc", "cola"))
    curve_plots.plot_curves(frame, "cola", tmp_path, COLORS, MARKERS)
    fig = figures[0]
    left, right = fig.axes
    assert left.get_ylim() == right.get_ylim()
    cola = frame[frame.task == "cola"]
    starts = {"original": cola[cola.method == "original"]["mean"].iloc[0],
              "control": cola[cola.method == "control"]["mean"].iloc[0]}
    for ax, condition, start in ((left, "prune-only", starts["original"]), (right, "prune+recover", starts["control"])):
        for method in METHODS:
            x, y = _line(ax, method).get_data()
            rows = cola[(cola.condition == condition) & (cola.method == method)].sort_values("level")
            assert x[0] == 0 and y[0] == pytest.approx(100 * start)
            assert np.allclose(x[1:], rows.level) and np.allclose(y[1:], 100 * rows["mean"])
    assert "MCC" in left.get_ylabel()


def test_bands_span_the_ci_and_auber_has_errors_on_both_axes(tmp_path, figures):
    frame = curves_frame()
    curve_plots.plot_curves(frame, "mrpc", tmp_path, COLORS, MARKERS)
    left = figures[0].axes[0]
    rows = frame[(frame.condition == "prune-only") & (frame.method == "voita")]
    band = next(c for c in left.collections if c.get_label() == "_voita band")
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(100 * rows.ci_low.min()) and ys.max() == pytest.approx(100 * rows.ci_high.max())
    bars = [c for c in left.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1 and bars[0].has_xerr and bars[0].has_yerr
    assert bars[0].get_label().startswith("auber")


def _overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2) if a.overlaps(b)]


def _shown_ticks(ax) -> list:
    """The tick labels drawn: visible, non-empty and inside the axis limits."""
    out = []
    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        for tick in axis.get_major_ticks():
            if tick.label1.get_visible() and tick.label1.get_text() and min(lo, hi) <= tick.get_loc() <= max(lo, hi):
                out.append(tick.label1)
    return out


def test_legend_outside_the_axes_and_no_texts_overlap(tmp_path, figures):
    curve_plots.plot_curves(curves_frame(), "mrpc", tmp_path, COLORS, MARKERS)
    fig = figures[0]
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends + [lg for sub in fig.subfigs for lg in sub.legends]
    box = legend.get_window_extent(renderer)
    assert len(fig.axes) == 2 and not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
    texts = [t for t in legend.get_texts() if t.get_text()]
    labels = {t.get_text() for t in texts}
    assert {"michel", "voita", "random", "unpruned (original): 84.0", "majority class: 68.0", "control: 85.0",
            "auber own count"} == labels
    notes = [t for sub in fig.subfigs for t in sub.texts]
    assert [t.get_text() for t in notes] == ["bands: 95% t-CI over n = 5 seeds (paired CIs in the tables)"]
    texts += notes + [ax.title for ax in fig.axes] + [ax.xaxis.label for ax in fig.axes]
    texts += [t for ax in fig.axes for t in _shown_ticks(ax)]
    assert len(texts) > 20 and _overlaps([t.get_window_extent(renderer) for t in texts]) == []
    assert not any(_overlaps([box, ax.get_tightbbox(renderer)]) for ax in fig.axes)


def test_an_empty_condition_says_so(tmp_path, figures):
    frame = curves_frame()
    curve_plots.plot_curves(frame[frame.condition != "prune+recover"], "mrpc", tmp_path, COLORS, MARKERS)
    right = figures[0].axes[1]
    assert [t.get_text() for t in right.texts] == ["no prune+recover cells"]


def test_atlas_heatmaps_show_the_matrix_and_a_blank_diagonal(tmp_path, figures):
    stability, agreement = atlas_frames()
    curve_plots.plot_atlas(stability, agreement, "mrpc", tmp_path, COLORS)
    fig = figures[0]
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 3
    names = [t.get_text() for t in heatmaps[0].get_yticklabels()]
    assert sorted(names) == sorted(METHODS)
    for ax, level in zip(heatmaps, LEVELS):
        array = ax.images[0].get_array()
        rows = agreement[agreement.level == level]
        for r in rows.itertuples():
            i, j = names.index(r.method_a), names.index(r.method_b)
            assert array[i, j] == pytest.approx(r.jaccard)
        assert np.ma.getmaskarray(array).diagonal().all()
        assert sorted(t.get_text() for t in ax.texts) == sorted(f"{v:.2f}" for v in rows.jaccard)
        assert ax.images[0].get_clim() == (0, 1)
    stab_ax = next(ax for ax in fig.axes if ax.get_ylabel() == "mean pairwise Jaccard")
    random = _line(stab_ax, "expected for random sets")
    assert np.allclose(random.get_xdata(), LEVELS)
    assert {line.get_label() for line in stab_ax.get_lines()} >= set(METHODS)


MAIN, OLD = "b6dd5a6c53c9", "0ebd5dde9803"  # the main set sorts after the other one


def test_a_methods_option_sets_keep_their_labels_in_both_panels_and_its_main_set_is_solid(tmp_path, figures):
    frame = curves_frame()
    frame.loc[frame.method == "voita", "opts"] = MAIN
    old = _row("mrpc", "prune-only", "voita", "fraction:0.5", "curve", 0.5, 0.8, 0.02)
    frame = pd.concat([frame, pd.DataFrame([dict(old, opts=OLD, n=1)])], ignore_index=True)
    curve_plots.plot_curves(frame, "mrpc", tmp_path, COLORS, MARKERS)
    fig = figures[0]
    left, right = fig.axes
    legend = [t.get_text() for sub in fig.subfigs for lg in sub.legends for t in lg.get_texts()]
    assert legend.count("voita opts=b6dd5a") == 1 and legend.count("voita opts=0ebd5d") == 1
    assert "voita" not in legend
    for ax in (left, right):
        main = _line(ax, "voita opts=b6dd5a")
        assert main.get_linestyle() == "-" and main.get_color() == COLORS["voita"]
    second = _line(left, "voita opts=0ebd5d")
    assert second.get_linestyle() == ":" and second.get_markerfacecolor() == "white"
    assert second.get_color() == COLORS["voita"]


def test_atlas_draws_a_methods_option_sets_in_its_colour_and_place(tmp_path, figures):
    names = ["random", f"voita opts={MAIN}", "dsp"]
    stability = pd.DataFrame([{"task": "mrpc", "method": n, "budget": f"fraction:{lv}", "level": lv, "n": 5,
                               "jaccard": 0.5, "random_expected": 0.3} for n in names for lv in LEVELS]
                             + [{"task": "mrpc", "method": f"voita opts={OLD}", "budget": "fraction:0.5",
                                 "level": 0.5, "n": 2, "jaccard": 0.4, "random_expected": 0.3}])
    at = [*names, f"voita opts={OLD}"]
    agreement = pd.DataFrame([{"task": "mrpc", "budget": "fraction:0.5", "level": 0.5, "method_a": a,
                               "method_b": b, "n": 2, "jaccard": 0.3} for a, b in itertools.permutations(at, 2)])
    curve_plots.plot_atlas(stability, agreement, "mrpc", tmp_path, {**COLORS, "dsp": "#0072B2"})
    fig = figures[0]
    (heatmap,) = [ax for ax in fig.axes if ax.images]
    # ordered as the methods, the hash cut to 6 digits as in the curves' legend
    assert [t.get_text() for t in heatmap.get_yticklabels()] == ["random", "voita opts=0ebd5d", "voita opts=b6dd5a",
                                                                 "dsp"]
    stab_ax = next(ax for ax in fig.axes if ax.get_ylabel() == "mean pairwise Jaccard")
    main, old = _line(stab_ax, "voita opts=b6dd5a"), _line(stab_ax, "voita opts=0ebd5d")
    assert main.get_color() == old.get_color() == COLORS["voita"]
    assert main.get_linestyle() == "-" and old.get_linestyle() == ":"


def test_atlas_png_keeps_a_white_margin_with_long_names(tmp_path):
    """Nine rows (an option set's hash among them) over five levels: the heatmaps' longest label once reached past
    the page's left edge; now no drawn pixel comes within 5 px (0.025 inch) of any edge."""
    from PIL import Image

    names = ["random", "confidence", "michel", f"voita opts={MAIN}", "dsp", "redundancy", "kwon", "kwon-rearrange",
             "kwon-search"]
    levels = (0.1, 0.3, 0.5, 0.7, 0.9)
    stability = pd.DataFrame([{"task": "rte", "method": n, "budget": f"fraction:{lv}", "level": lv, "n": 10,
                               "jaccard": 0.5, "random_expected": 0.3} for n in names[:7] for lv in levels])
    at = {lv: names if lv == 0.3 else names[:7] for lv in levels}  # the ablations at 30% only
    agreement = pd.DataFrame([{"task": "rte", "budget": f"fraction:{lv}", "level": lv, "method_a": a,
                               "method_b": b, "n": 10, "jaccard": 0.4}
                              for lv in levels for a, b in itertools.permutations(at[lv], 2)])
    (png, _pdf) = curve_plots.plot_atlas(stability, agreement, "rte", tmp_path, COLORS)
    pixels = np.asarray(Image.open(png).convert("L"))
    edges = np.concatenate([pixels[:5].ravel(), pixels[-5:].ravel(), pixels[:, :5].ravel(), pixels[:, -5:].ravel()])
    assert edges.min() == 255
