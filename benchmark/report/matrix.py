"""Selection x repair (issue 62): for a folder whose selectors' masks got several repairs (``bench run --repair``),
per task and level the mean score of every (selector, repair) with its paired difference from the original, the
area above chance of every (selector, repair) curve, their declared tests and the heatmap
``plots/matrix_<task>.png|pdf``. The rows come from the analysis's frame; the areas from ``auc.csv``'s method rows
(the repair panels' reference is the original, as prune-only's).

Declared families (secondary, docs/protocol.md §5), each Holm-adjusted on its own:

* ``task/matrix/LEVEL/repair-vs-none``: at one level, each repair's score minus the same selector's prune-only
  score (the same mask on the same seed), every (selector, repair) of the level;
* ``task/matrix/area/repair-vs-none``: the same on areas above chance (the heatmap's marks);
* ``task/matrix/area/best-vs-runner-up``: the (selector, repair) of the highest mean area minus the next one.

Selectors pairwise within a repair are the repair condition's own ``pairwise`` families (analysis, auc.csv).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report.analysis import ALPHA, base_failed_seeds, is_level
from headprune_bench.benchmark.report.curves import display_name, seed_areas
from headprune_bench.benchmark.report.families import FAMILY_COLUMNS, family_row
from headprune_bench.benchmark.report.units import budget_key, task_key
from headprune_bench.benchmark.store.records import (
    NO_REPAIR,
    ORIGINAL,
    PRUNE_ONLY,
    RECOVER,
    is_repair_condition,
    repair_of,
)

OWN_SCALES = "own scales"
"""The repair column of a prune-only cell whose method scaled its own mask (``kwon``: Kwon's tuning is part of
the method), which is therefore no ``none``."""
MATRIX_COLUMNS = ["task", "level", "selector", "repair", "n", "mean", "delta", "delta_ci_low", "delta_ci_high",
                  "degenerate", "base_failed"]
"""``matrix.csv``: per (task, level, selector, repair) the mean score over the seeds (percent points, MCC x 100),
its paired mean difference from the original with a 95% bootstrap CI, and degenerate seeds; ``base_failed``: every
seed's base model failed, so these are the failed seeds' scores (a plumbing check, in no test)."""
TEST_COLUMNS = ["family", "task", "level", "selector", "repair", "vs", "n", "mean", "ci_low", "ci_high", "p_exact",
                "p_holm", "significant"]
"""``matrix_tests.csv``: one row per declared test; ``vs`` the other side (``none``, or the runner-up)."""
AREA_COLUMNS = ["task", "selector", "repair", "n", "mean", "ci_low", "ci_high"]
"""``matrix_area.csv``: the area above chance of each (selector, repair) curve (auc.csv's method rows)."""


def repairs_in(frame: pd.DataFrame) -> list[str]:
    """The repair conditions of ``frame`` (``prune+<repair>``), in name order."""
    return sorted(c for c in frame.condition.unique() if is_repair_condition(c))


def has_matrix(frame: pd.DataFrame) -> bool:
    """Whether the folder holds a repair condition (the matrix section is written)."""
    return not frame.empty and bool(repairs_in(frame))


def _kept(frame: pd.DataFrame) -> pd.DataFrame:
    """Prune-only, prune+recover and repair rows of fixed levels, base-failed seeds left out (a task whose every
    seed failed keeps them, with ``base_failed`` True), with a ``repair`` column (``none``, ``finetune``, the
    repair's name) and a ``selector`` column (:func:`curves.display_name`)."""
    parts = []
    for _, tdf in frame.groupby("task", sort=False):
        bad = base_failed_seeds(tdf)
        kept = tdf[~tdf.seed.isin(bad)]
        # every seed failed (a smoke run): its rows stay, flagged, for a plumbing check without statistics
        parts.append(kept.assign(base_failed=False) if not kept.empty else tdf.assign(base_failed=True))
    df = pd.concat(parts) if parts else frame.assign(base_failed=False)
    keep = df.condition.isin([PRUNE_ONLY, RECOVER]) | df.condition.map(is_repair_condition)
    df = df[keep & df.budget.map(is_level) & (df.method != ORIGINAL)].copy()
    df["repair"] = df.condition.map(repair_of)
    df.loc[(df.condition == PRUNE_ONLY) & df.head_scales.astype(bool), "repair"] = OWN_SCALES
    df["selector"] = df.unit.map(display_name)  # (as auc.csv names a curve: the options hash where it ran several)
    return df


def _originals(frame: pd.DataFrame) -> dict[tuple[str, int], float]:
    o = frame[(frame.method == ORIGINAL) & (frame.condition == PRUNE_ONLY)]
    return {(str(t), int(s)): 100 * float(v) for t, s, v in zip(o.task, o.seed, o.score)}


def _repair_order(repairs) -> list[str]:
    order = {NO_REPAIR: 0, OWN_SCALES: 1, "finetune": 3}
    return sorted(set(repairs), key=lambda r: (order.get(r, 2), r))


def matrix_frame(frame: pd.DataFrame, n_boot: int = 10_000, seed: int = 0) -> pd.DataFrame:
    """:data:`MATRIX_COLUMNS` of the report's record frame (``RunData.frame``)."""
    df = _kept(frame)
    originals = _originals(frame)
    rows = []
    for (task, budget, selector, repair), g in df.groupby(["task", "budget", "selector", "repair"], sort=False):
        scores = 100 * g.score.to_numpy(float)
        ref = [originals.get((str(task), int(s)), math.nan) for s in g.seed]
        diffs = scores - np.asarray(ref, float)
        diffs = diffs[np.isfinite(diffs)]
        low, high = stats.bootstrap_ci(diffs, n_boot=n_boot, seed=seed) if diffs.size > 1 else (math.nan, math.nan)
        rows.append({"task": task, "level": budget, "selector": selector, "repair": repair, "n": int(len(g)),
                     "mean": float(scores.mean()), "delta": float(diffs.mean()) if diffs.size else math.nan,
                     "delta_ci_low": low, "delta_ci_high": high, "degenerate": int(g.degenerate.astype(bool).sum()),
                     "base_failed": bool(g.base_failed.any())})
    out = pd.DataFrame(rows, columns=MATRIX_COLUMNS)
    if out.empty:
        return out
    rank = {r: i for i, r in enumerate(_repair_order(out.repair))}
    out = out.assign(_t=out.task.map(task_key), _l=out.level.map(budget_key), _r=out.repair.map(rank))
    return out.sort_values(["_t", "_l", "selector", "_r"]).drop(columns=["_t", "_l", "_r"]).reset_index(drop=True)


def _holm_rows(rows: list[dict]) -> list[dict]:
    ps = [r["p_exact"] for r in rows]
    if rows:
        adjusted, reject = stats.holm(ps, alpha=ALPHA)
        for r, p, rej in zip(rows, adjusted, reject):
            r["p_holm"], r["significant"] = float(p), bool(rej)
    return rows


def _test_row(family: str, task: str, level: str, selector: str, repair: str, vs: str, a, b, n_boot: int,
              seed: int) -> dict:
    comp = stats.compare(a, b, n_boot=n_boot, seed=seed)
    return {"family": family, "task": task, "level": level, "selector": selector, "repair": repair, "vs": vs,
            "n": comp.n, "mean": comp.mean_diff, "ci_low": comp.ci_low, "ci_high": comp.ci_high,
            "p_exact": comp.p_exact, "p_holm": math.nan, "significant": False}


def score_tests(frame: pd.DataFrame, n_boot: int = 10_000, seed: int = 0) -> list[dict]:
    """The ``task/matrix/LEVEL/repair-vs-none`` families: each training-free repair of a selector against its
    prune-only cell at the same level, paired by seed (only seeds with both; score in percent points)."""
    df = _kept(frame)
    df = df[(df.repair != "finetune") & ~df.base_failed]
    rows = []
    for (task, budget), g in df.groupby(["task", "budget"], sort=False):
        family = f"{task}/matrix/{budget}/repair-vs-none"
        at = []
        for selector, s in g.groupby("selector", sort=True):
            base = s[s.repair == NO_REPAIR]
            none = {int(k): 100 * float(v) for k, v in zip(base.seed, base.score)}
            for repair in _repair_order(s.repair):
                if repair == NO_REPAIR:
                    continue
                r = s[s.repair == repair]
                paired = [(100 * float(v), none[int(k)]) for k, v in zip(r.seed, r.score) if int(k) in none]
                if paired:
                    a, b = zip(*paired)
                    at.append(_test_row(family, task, budget, selector, repair, NO_REPAIR, a, b, n_boot, seed))
        rows += _holm_rows(at)
    return rows


def area_frame(auc: pd.DataFrame) -> pd.DataFrame:
    """:data:`AREA_COLUMNS` from ``auc.csv``'s method rows of prune-only and the repair conditions."""
    if auc is None or auc.empty:
        return pd.DataFrame(columns=AREA_COLUMNS)
    m = auc[(auc.kind == "method") & (auc.condition.eq(PRUNE_ONLY) | auc.condition.map(is_repair_condition))]
    out = pd.DataFrame({"task": m.task, "selector": m.method, "repair": m.condition.map(repair_of), "n": m.n,
                        "mean": m["mean"], "ci_low": m.ci_low, "ci_high": m.ci_high})
    return out.reset_index(drop=True)[AREA_COLUMNS]


def area_tests(areas: dict[tuple[str, str, str], dict[int, float]], n_boot: int = 10_000, seed: int = 0) -> list[dict]:
    """``task/matrix/area/repair-vs-none`` and ``task/matrix/area/best-vs-runner-up`` from per-seed areas keyed
    ``(task, selector, repair)``."""
    rows = []
    for task in sorted({k[0] for k in areas}, key=task_key):
        at = []
        mine = {k: v for k, v in areas.items() if k[0] == task}
        for (_, selector, repair), per_seed in sorted(mine.items()):
            none = mine.get((task, selector, NO_REPAIR))
            if repair == NO_REPAIR or none is None:
                continue
            shared = sorted(set(per_seed) & set(none))
            if shared:
                at.append(_test_row(f"{task}/matrix/area/repair-vs-none", task, "area", selector, repair, NO_REPAIR,
                                    [per_seed[s] for s in shared], [none[s] for s in shared], n_boot, seed))
        rows += _holm_rows(at)
        ranked = sorted(mine.items(), key=lambda kv: -float(np.mean(list(kv[1].values()))) if kv[1] else math.inf)
        if len(ranked) >= 2:
            (best, a), (second, b) = ranked[0], ranked[1]
            shared = sorted(set(a) & set(b))
            if shared:
                row = _test_row(f"{task}/matrix/area/best-vs-runner-up", task, "area", best[1], best[2],
                                f"{second[1]} +{second[2]}", [a[s] for s in shared], [b[s] for s in shared], n_boot,
                                seed)
                rows += _holm_rows([row])
    return rows


def spread_lines(matrix: pd.DataFrame) -> list[str]:
    """Per task and level, one descriptive line: the largest range of mean scores across selectors under one
    repair, and across repairs under one selector (percent points; no test)."""
    lines = []
    for (task, level), g in matrix.groupby(["task", "level"], sort=False):
        by_repair = g.groupby("repair")["mean"].agg(lambda x: x.max() - x.min() if len(x) > 1 else math.nan)
        by_selector = g.groupby("selector")["mean"].agg(lambda x: x.max() - x.min() if len(x) > 1 else math.nan)
        if by_repair.notna().any() and by_selector.notna().any():
            r, s = by_repair.idxmax(), by_selector.idxmax()
            lines.append(f"{task} {level}: across selectors under one repair the means spread by up to "
                         f"{by_repair.max():.2f} points ({r}; median over repairs {by_repair.median():.2f}); across "
                         f"repairs under one selector by up to {by_selector.max():.2f} ({s}; median "
                         f"{by_selector.median():.2f})")
    return lines


def heatmap(task: str, area: pd.DataFrame, tests: list[dict], folder: Path,
            matrix: pd.DataFrame | None = None) -> list[Path]:
    """``matrix_<task>.png|pdf``: selectors (rows) x repairs (columns) coloured by mean area above chance, each
    cell's value written in it, ``*`` where its area differs from the selector's prune-only area (Holm p < 0.05
    in ``task/matrix/area/repair-vs-none``). A task without areas (every base model failed, or one level) shows
    ``matrix``'s mean score over its levels instead, titled so. Returns the files written (none without either)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = area[area.task == task]
    label, vmax, title = "area above chance", 1.0, "area above chance (1 = the unpruned margin kept)"
    if a.empty and matrix is not None and not matrix[matrix.task == task].empty:
        m = matrix[(matrix.task == task) & (matrix.repair != "finetune")]
        a = m.groupby(["selector", "repair"], as_index=False)["mean"].mean().assign(task=task)
        failed = bool(m.base_failed.any())
        label, vmax = "mean score", 100.0
        title = ("mean score over the levels: every base model failed, a plumbing check, not a result" if failed
                 else "mean score over the levels (no area above chance)")
    if a.empty:
        return []
    repairs = _repair_order(a.repair)
    selectors = sorted(a.selector.unique())
    grid = np.full((len(selectors), len(repairs)), np.nan)
    for s, r, v in zip(a.selector, a.repair, a["mean"]):
        grid[selectors.index(s), repairs.index(r)] = float(v)
    marks = {(t["selector"], t["repair"]) for t in tests if t["family"] == f"{task}/matrix/area/repair-vs-none"
             and t["significant"]}
    fig, ax = plt.subplots(figsize=(1.6 + 1.25 * len(repairs), 1.2 + 0.45 * len(selectors)), constrained_layout=True)
    image = ax.imshow(grid, cmap="viridis", vmin=0.0, vmax=max(vmax, float(np.nanmax(grid))), aspect="auto")
    for i, s in enumerate(selectors):
        for j, r in enumerate(repairs):
            if np.isfinite(grid[i, j]):
                text = f"{grid[i, j]:.2f}" + ("*" if (s, r) in marks else "")
                ax.text(j, i, text, ha="center", va="center", fontsize=9,
                        color="black" if grid[i, j] > 0.6 * vmax else "white")
    ax.set_xticks(range(len(repairs)), [("none (prune-only)" if r == NO_REPAIR else r) for r in repairs])
    ax.set_yticks(range(len(selectors)), selectors)
    ax.set_xlabel("repair")
    ax.set_ylabel("selector")
    ax.set_title(f"{task.upper()}: {title}\n* repair differs from none (Holm p < {ALPHA:g})", fontsize=10, wrap=True)
    fig.colorbar(image, ax=ax, label=label)
    paths = []
    for ext in ("png", "pdf"):
        path = folder / f"matrix_{task}.{ext}"
        fig.savefig(path, dpi=150)
        paths.append(path)
    plt.close(fig)
    return paths


@dataclass
class MatrixFrames:
    """``matrix`` (:data:`MATRIX_COLUMNS`), ``area`` (:data:`AREA_COLUMNS`), ``tests`` (:data:`TEST_COLUMNS`) and
    the descriptive ``spread`` lines of a folder with repair cells."""

    matrix: pd.DataFrame
    area: pd.DataFrame
    tests: pd.DataFrame
    spread: list[str]


def matrix_frames(data, auc: pd.DataFrame | None, n_boot: int = 10_000, seed: int = 0) -> MatrixFrames:
    """The :class:`MatrixFrames` of ``data`` (``RunData``), the areas from ``auc`` (auc.csv) and per seed from
    :func:`curves.seed_areas`."""
    matrix = matrix_frame(data.frame, n_boot, seed)
    per_seed = {(t, name, repair_of(c)): v for (t, c, name), v in seed_areas(data).items()
                if c == PRUNE_ONLY or is_repair_condition(c)}
    tests = score_tests(data.frame, n_boot, seed) + area_tests(per_seed, n_boot, seed)
    return MatrixFrames(matrix, area_frame(auc), pd.DataFrame(tests, columns=TEST_COLUMNS), spread_lines(matrix))


def family_rows(tests: pd.DataFrame) -> pd.DataFrame:
    """The matrix's declared families as rows of ``families.csv`` (:data:`families.FAMILY_COLUMNS`)."""
    rows = [family_row(str(f), [f"{s} +{r} − {v}" for s, r, v in zip(g.selector, g.repair, g.vs)],
                       [int(n) for n in g.n], list(g.p_holm.astype(float)), 0)
            for f, g in tests.groupby("family", sort=False)]
    return pd.DataFrame(rows, columns=FAMILY_COLUMNS)


def matrix_section(mf: MatrixFrames, plots: list[Path] | None = None) -> list[str]:
    """The report's "Selection x repair" section: per task and level the mean score (Δ vs the original) of every
    (selector, repair), the areas above chance, the declared tests and the spread lines."""
    md = ["## Selection x repair: which heads, and how the rest is repaired", "",
          "Each selector's prune-only mask at a level, evaluated as it is (`none`), after each training-free repair "
          "(`bias`, `scales`, `weights`: the same mask on the base weights) and after the recovery fine-tune "
          "(`finetune`, prune+recover). Cells: mean score over the seeds, with its paired difference from the "
          "unpruned model (Δ, percent points). Tests (secondary families, `matrix_tests.csv`): each repair "
          "against `none` of the same selector and level; areas likewise; the best (selector, repair) by area "
          "against the runner-up. Selectors pairwise within a repair: that repair's own tables below. "
          f"`{OWN_SCALES}`: a method whose prune-only cell carries its own repair (kwon's head scales; its "
          "selection alone is kwon-rearrange), which takes no other.", ""]
    for task in dict.fromkeys(mf.matrix.task[mf.matrix.base_failed.astype(bool)]):
        md += [f"**{task.upper()}: every seed's base model failed** (protocol.md §6): the tables below show those "
               f"seeds' scores, a plumbing check, not a result; no test is computed and no area drawn.", ""]
    for (task, level), g in mf.matrix.groupby(["task", "level"], sort=False):
        repairs = _repair_order(g.repair)
        table = g.pivot(index="selector", columns="repair", values="mean")
        delta = g.pivot(index="selector", columns="repair", values="delta")
        rows = [[s, *[f"{table.at[s, r]:.2f} ({delta.at[s, r]:+.2f})" if r in table and np.isfinite(table.at[s, r])
                      else "—" for r in repairs]] for s in table.index]
        md += [f"**{task.upper()} {level}: mean score (Δ vs original)**", "",
               "| selector | " + " | ".join(repairs) + " |", "|:--|" + "--:|" * len(repairs)]
        md += ["| " + " | ".join(row) + " |" for row in rows] + [""]
        if g.base_failed.astype(bool).any():
            continue
        t = mf.tests[(mf.tests.task == task) & (mf.tests.level == level)]
        sig = t[t.significant.astype(bool)]
        md += [f"Repair vs none at {level}: {len(sig)} of {len(t)} significant (Holm within "
               f"`{task}/matrix/{level}/repair-vs-none`)" + (": " + "; ".join(
                   f"{s} +{r} {m:+.2f} (p_holm {p:.4f})" for s, r, m, p in zip(sig.selector, sig.repair, sig["mean"],
                                                                              sig.p_holm)) if len(sig) else "") + ".",
               ""]
    if not mf.area.empty:
        md += ["**Area above chance per (selector, repair)** (1 = the unpruned model's margin over the majority kept "
               "at every level; prune-only and the training-free repairs, all against the original):", ""]
        for task, g in mf.area.groupby("task", sort=False):
            repairs = _repair_order(g.repair)
            table = g.pivot(index="selector", columns="repair", values="mean")
            md += [f"{task.upper()}:", "", "| selector | " + " | ".join(repairs) + " |",
                   "|:--|" + "--:|" * len(repairs)]
            md += ["| " + " | ".join([s, *[f"{table.at[s, r]:.3f}" if r in table and np.isfinite(table.at[s, r])
                                           else "—" for r in repairs]]) + " |" for s in table.index] + [""]
            for row in mf.tests[mf.tests.family == f"{task}/matrix/area/best-vs-runner-up"].itertuples():
                md += [f"Best by area: {row.selector} +{row.repair}, ahead of {row.vs} by {row.mean:+.3f} "
                       f"(95% CI {row.ci_low:+.3f} to {row.ci_high:+.3f}, exact p {row.p_exact:.4f}; "
                       f"{'significant' if row.significant else 'not significant'}).", ""]
    if mf.spread:
        md += ["Spread (descriptive, no test):", ""] + [f"- {line}" for line in mf.spread] + [""]
    for path in plots or []:
        if path.suffix == ".png":
            md += [f"![{path.stem}](plots/{path.name})", ""]
    return md
