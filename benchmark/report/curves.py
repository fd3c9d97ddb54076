"""Accuracy-sparsity curves of a sweep (one method at several budget levels on the same (task, seed)s): the curve
points, each method's normalised area with paired comparisons of areas, and the head-set atlas (stability of a
method's pruned heads across seeds, agreement between methods on one seed). Scores and areas are fractions (MCC in
[-1, 1]); base-failed seeds are left out as in :func:`analysis.analyse`."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report.analysis import (
    ABLATION,
    NULL_CONTROL,
    NULL_CONTROLS,
    PAIRWISE,
    SUPERSEDED,
    base_failed_seeds,
    family_id,
    is_level,
    superseded_units,
)
from headprune_bench.benchmark.report.load import RunData
from headprune_bench.benchmark.report.units import Unit, ablation_parent, budget_key, sorted_units, task_key
from headprune_bench.benchmark.stats.curves import (
    AreaComparison,
    area_above_chance,
    area_comparison,
    expected_mean_pairwise_jaccard,
    holm_areas,
    jaccard,
    mean_pairwise_jaccard,
    normalised_area,
)
from headprune_bench.benchmark.store.records import (
    CONTROL,
    CONTROL_NAME,
    ORIGINAL,
    PRUNE_ONLY,
    RECOVER,
    is_repair_condition,
)

CURVES_COLUMNS = ["task", "condition", "method", "budget", "opts", "kind", "metric", "n", "level", "level_sd",
                  "level_ci_low", "level_ci_high", "mean", "sd", "ci_low", "ci_high", "majority", "degenerate",
                  "at_or_below_chance"]
AUC_COLUMNS = ["task", "condition", "kind", "method", "vs", "family", "outside", "levels", "n", "mean", "sd", "ci_low",
               "ci_high", "p_exact", "p_holm", "min_p", "area_mean", "area_sd", "area_ci_low", "area_ci_high", "margin",
               "note"]
"""``mean`` ... ``min_p``: the area above chance (the primary summary, :func:`stats.curves.area_above_chance`: share of
the panel's mean margin of the reference over the majority class kept, ``margin``), or its paired difference with
the tests; ``outside``: why a curve (null control, superseded option set) and its pairs stay out of every family
(exact p only); ``area_*``: the normalised area in score units (secondary, descriptive:
:func:`stats.curves.normalised_area`)."""
STABILITY_COLUMNS = ["task", "method", "budget", "level", "n", "jaccard", "random_expected"]
AGREEMENT_COLUMNS = ["task", "budget", "level", "method_a", "method_b", "n", "jaccard"]
#: Per condition of a curve: the conditions of its rows and the name of its unpruned reference row.
PANELS = {PRUNE_ONLY: ((PRUNE_ONLY,), ORIGINAL), RECOVER: ((RECOVER, CONTROL), CONTROL_NAME)}


def panel_of(condition: str) -> tuple[tuple[str, ...], str]:
    """(the conditions of ``condition``'s curve panel, its reference's name): :data:`PANELS`, or for a repair
    condition ``((condition,), "original")`` (the original's prune-only rows are its reference)."""
    if is_repair_condition(condition):
        return (condition,), ORIGINAL
    return PANELS[condition]


@dataclass
class CurveFrames:
    """``curves`` (curves.csv), ``auc`` (auc.csv), ``stability`` and ``agreement`` (atlas_*.csv), columns
    :data:`CURVES_COLUMNS`, :data:`AUC_COLUMNS`, :data:`STABILITY_COLUMNS`, :data:`AGREEMENT_COLUMNS`;
    ``base_failed``: per task, the seeds left out (base model failed)."""

    curves: pd.DataFrame
    auc: pd.DataFrame
    stability: pd.DataFrame
    agreement: pd.DataFrame
    base_failed: dict[str, list[int]] = field(default_factory=dict)


def kind_of(unit: Unit) -> str:
    """``reference`` (original, control), ``curve`` (a fixed level, :func:`analysis.is_level`), ``point`` (a
    method's own count, e.g. AUBER) or ``matched`` (a count matched to a budget setter's, per seed)."""
    if unit.name in (ORIGINAL, CONTROL_NAME):
        return "reference"
    if is_level(unit.budget):
        return "curve"
    return "matched" if unit.budget.startswith("matched:") else "point"


def has_sweep(data: RunData) -> bool:
    """Whether some method ran two or more fixed levels on some task."""
    df = data.frame
    if df.empty:
        return False
    fixed = df[df.budget.map(is_level)]
    return bool((fixed.groupby(["task", "method"]).budget.nunique() >= 2).any())


def display_name(unit: Unit) -> str:
    """A row's method name, with ``opts=HASH`` where its method ran several option sets."""
    return unit.name + (f" opts={unit.opts}" if unit.opts else "")


def _fractions(g: pd.DataFrame) -> np.ndarray:
    return pd.to_numeric(g.heads_pruned).to_numpy(float) / pd.to_numeric(g.heads_total).to_numpy(float)


def _kept(data: RunData) -> tuple[pd.DataFrame, dict[str, list[int]]]:
    """The frame without base-failed seeds and without own-fine-tuning rows, and the seeds left out per task."""
    parts, failed = [], {}
    for task, tdf in data.frame.groupby("task", sort=False):
        bad = base_failed_seeds(tdf)
        if bad:
            failed[str(task)] = bad
        curve = tdf.condition.isin([PRUNE_ONLY, RECOVER, CONTROL]) | tdf.condition.map(is_repair_condition)
        parts.append(tdf[~tdf.seed.isin(bad) & curve])
    return pd.concat(parts), failed


def _panels(kept: pd.DataFrame):
    """(task, condition, its frame, its unpruned reference name) per task and curve condition with rows: the
    :data:`PANELS`, then each repair condition (its rows and the original's, its reference)."""
    for task in sorted(kept.task.unique(), key=task_key):
        tdf = kept[kept.task == task]
        for condition, (conditions, reference) in PANELS.items():
            cdf = tdf[tdf.condition.isin(conditions)]
            if not cdf.empty:
                yield task, condition, cdf, reference
        unpruned = (tdf.condition == PRUNE_ONLY) & (tdf.method == ORIGINAL)
        for condition in sorted(c for c in tdf.condition.unique() if is_repair_condition(c)):
            yield task, condition, tdf[(tdf.condition == condition) | unpruned], ORIGINAL


def _curve_row(task: str, u: Unit, g: pd.DataFrame) -> dict:
    frac, score = _fractions(g), g.score.to_numpy(float)
    lv, sc = stats.describe(frac), stats.describe(score)
    lv_ci, sc_ci = stats.mean_ci_t(frac), stats.mean_ci_t(score)
    return {"task": task, "condition": u.condition, "method": u.name, "budget": u.budget, "opts": u.opts or "",
            "kind": kind_of(u), "metric": g.metric.iloc[0], "n": int(len(g)), "level": lv["mean"],
            "level_sd": lv["sd"], "level_ci_low": lv_ci[0], "level_ci_high": lv_ci[1], "mean": sc["mean"],
            "sd": sc["sd"], "ci_low": sc_ci[0], "ci_high": sc_ci[1], "majority": float(g.majority.mean()),
            "degenerate": int(g.degenerate.astype(bool).sum()),
            "at_or_below_chance": int((score <= g.majority.to_numpy(float)).sum())}


def curves_frame(kept: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, condition, unit) of ``kept`` (:data:`CURVES_COLUMNS`): levels and scores over seeds."""
    rows = [_curve_row(task, u, cdf[cdf.unit == u]) for task, _, cdf, _ in _panels(kept)
            for u in sorted_units(list(cdf.unit.unique()))]
    return pd.DataFrame(rows, columns=CURVES_COLUMNS)


# --------------------------------------------------------------------------- areas


@dataclass
class _Curve:
    """One method's curve in one panel: its levels, per-seed areas above chance (``areas``) and normalised areas
    (``raw``), or why it has none, per (level, seed) counts."""

    name: str
    levels: list[str]
    areas: dict[int, float]
    heads: dict[tuple[str, int], int]
    note: str = ""
    raw: dict[int, float] = field(default_factory=dict)
    ablation: bool = False
    outside: str = ""


def _curve(name: str, cdf: pd.DataFrame, unpruned: dict[int, float], majority: dict[int, float],
           margin: float) -> _Curve:
    """The :class:`_Curve` of one method's rows ``cdf`` (its levels); ``areas`` empty and ``note`` set when a
    level is missing on some seed, or no seed has an unpruned score above chance."""
    levels = sorted(cdf.budget.unique(), key=budget_key)
    heads = {(b, int(s)): int(h) for b, s, h in zip(cdf.budget, cdf.seed, cdf.heads_pruned)}
    seeds = sorted(int(s) for s in cdf.seed.unique())
    ablation = bool(ablation_parent(str(cdf.method.iloc[0])))
    gaps = [f"{b} on seed(s) {', '.join(str(s) for s in seeds if (b, s) not in heads)}" for b in levels
            if any((b, s) not in heads for s in seeds)]
    if gaps:
        return _Curve(name, levels, {}, heads, "missing " + "; ".join(gaps) + ": no area", ablation=ablation)
    areas, raw, notes = {}, {}, []
    for s in seeds:
        if s not in unpruned or not math.isfinite(majority.get(s, math.nan)):
            notes.append(f"seed {s} has no unpruned score or majority baseline: left out")
            continue
        g = cdf[cdf.seed == s]
        try:
            raw[s] = normalised_area(_fractions(g), g.score.to_numpy(float), unpruned[s])
            areas[s] = area_above_chance(_fractions(g), g.score.to_numpy(float), unpruned[s], majority[s], margin)
        except ValueError as exc:  # two levels that pruned the same count; no margin over chance in the panel
            if "majority baseline" not in str(exc):
                return _Curve(name, levels, {}, heads, f"seed {s}: {exc}", ablation=ablation)
            notes.append(f"seed {s}: {exc}: left out")
            raw.pop(s, None)
    note = "; ".join(notes) if areas else "no seed with an unpruned score and a margin over chance"
    return _Curve(name, levels, areas, heads, note, raw, ablation)


def _method_row(base: dict, c: _Curve) -> dict:
    if not c.areas:
        return {**base, "kind": "excluded", "method": c.name, "n": 0, "note": c.note}
    a, r = np.array(list(c.areas.values())), np.array([c.raw[s] for s in c.areas])
    d, (low, high) = stats.describe(a), stats.mean_ci_t(a)
    dr, (rlow, rhigh) = stats.describe(r), stats.mean_ci_t(r)
    return {**base, "kind": "method", "method": c.name, "outside": c.outside, "n": d["n"], "mean": d["mean"],
            "sd": d["sd"], "ci_low": low, "ci_high": high, "area_mean": dr["mean"], "area_sd": dr["sd"],
            "area_ci_low": rlow, "area_ci_high": rhigh, "note": c.note}


def _pair_row(base: dict, a: _Curve, b: _Curve, n_boot: int, seed: int) -> tuple[dict, AreaComparison | None]:
    """The row of ``a - b`` (areas paired by seed) and its AreaComparison (None when it is no test)."""
    shared = sorted(set(a.areas) & set(b.areas))
    kind = ABLATION if a.ablation or b.ablation else PAIRWISE
    row = {**base, "kind": "pair", "method": a.name, "vs": b.name, "n": len(shared), "outside": a.outside or b.outside,
           "family": family_id(base["task"], base["condition"], "area", kind)}
    if not shared:
        return {**row, "note": "no shared seed: no test"}, None
    differ = sorted({s for (lv, s), h in a.heads.items() if s in shared and b.heads.get((lv, s), h) != h})
    if differ:
        return {**row, "note": f"head counts differ on seed(s) {', '.join(map(str, differ))}: no test"}, None
    comp = area_comparison([a.areas[s] for s in shared], [b.areas[s] for s in shared], n_boot=n_boot, seed=seed)
    d = stats.describe(np.array([a.raw[s] - b.raw[s] for s in shared]))
    low, high = stats.bootstrap_ci([a.raw[s] - b.raw[s] for s in shared], n_boot=n_boot, seed=seed)
    return {**row, "mean": comp.mean, "sd": comp.sd, "ci_low": comp.ci_low, "ci_high": comp.ci_high,
            "p_exact": comp.p_exact, "min_p": comp.min_p, "area_mean": d["mean"], "area_sd": d["sd"],
            "area_ci_low": low, "area_ci_high": high, "note": ""}, comp


def _panel_reference(cdf: pd.DataFrame, reference: str) -> tuple[dict[int, float], dict[int, float], float]:
    """(seed -> the reference's score, seed -> majority baseline, the panel's mean margin over the majority)."""
    ref = cdf[cdf.unit.map(lambda u: u.name) == reference]
    unpruned = {int(s): float(v) for s, v in zip(ref.seed, ref.score)}
    majority = {int(s): float(v) for s, v in zip(ref.seed, ref.majority)}
    margins = [max(unpruned[s] - m, 0.0) for s, m in majority.items() if math.isfinite(m)]
    return unpruned, majority, float(np.mean(margins)) if margins else math.nan


def _panel_curves(cdf: pd.DataFrame, unpruned: dict[int, float], majority: dict[int, float], margin: float,
                  outside: dict[Unit, str] | None = None) -> list[_Curve]:
    """The :class:`_Curve` of every method of one panel with two or more fixed levels."""
    units = [u for u in sorted_units(list(cdf.unit.unique())) if kind_of(u) == "curve"]
    by_name: dict[str, list[Unit]] = {}
    for u in units:
        by_name.setdefault(display_name(u), []).append(u)
    curves = []
    for name, us in by_name.items():
        if len(us) >= 2:
            curves.append(_curve(name, cdf[cdf.unit.isin(us)], unpruned, majority, margin))
            reasons = {(outside or {}).get(u, "") for u in us}
            curves[-1].outside = "" if reasons == {""} else ", ".join(sorted(reasons - {""}))
    return curves


def seed_areas(data: RunData) -> dict[tuple[str, str, str], dict[int, float]]:
    """Per (task, condition, curve name as in auc.csv): seed -> area above chance, the values auc.csv's method
    rows summarise (empty without a sweep)."""
    if not has_sweep(data):
        return {}
    kept, _ = _kept(data)
    out = {}
    for task, condition, cdf, reference in _panels(kept):
        for c in _panel_curves(cdf, *_panel_reference(cdf, reference)):
            if c.areas:
                out[(task, condition, c.name)] = dict(c.areas)
    return out


def _panel_auc(task: str, condition: str, cdf: pd.DataFrame, reference: str, n_boot: int, seed: int,
               outside: dict[Unit, str] | None = None) -> list[dict]:
    """Method, excluded and pair rows of one (task, condition); Holm within each declared family of its pairs
    (``task/condition/area/pairwise``; pairs with an ablation: ``.../ablation``); the curves of ``outside`` units
    (unit -> why) and their pairs keep their exact p outside every family. Areas above chance are divided by the
    reference's mean margin over the majority class, one constant per panel."""
    unpruned, majority, margin = _panel_reference(cdf, reference)
    base = dict.fromkeys(AUC_COLUMNS, math.nan) | {"task": task, "condition": condition, "vs": "", "family": "",
                                                   "outside": "", "margin": margin, "note": ""}
    curves = _panel_curves(cdf, unpruned, majority, margin, outside)
    rows = [_method_row({**base, "levels": ";".join(c.levels)}, c) for c in curves]
    tested = [c for c in curves if c.areas]
    pairs, comps = [], []
    for i, j in itertools.combinations(range(len(tested)), 2):
        a, b = tested[j], tested[i]  # the later row minus the earlier, as in the report's pairwise tables
        if a.levels == b.levels:
            row, comp = _pair_row({**base, "levels": ";".join(a.levels)}, a, b, n_boot, seed)
            pairs.append(row)
            comps.append(comp)
    for family in dict.fromkeys(row["family"] for row in pairs):
        at = [(row, comp) for row, comp in zip(pairs, comps)
              if row["family"] == family and comp is not None and not row["outside"]]
        for (row, _), adjusted in zip(at, holm_areas([comp for _, comp in at])):
            row["p_holm"] = adjusted.p_holm
    return rows + pairs


def auc_frame(kept: pd.DataFrame, n_boot: int = 10_000, seed: int = 0,
              outside: dict[Unit, str] | None = None) -> pd.DataFrame:
    """Areas (:data:`AUC_COLUMNS`) of every curve method with two or more levels, per task and condition (from
    the seed's original score in prune-only, its control's in prune+recover), and every pair of methods that ran
    the same levels, Holm within each declared family of the (task, condition); ``outside``: units (null
    controls, superseded option sets) whose curves stay out of every family, with why."""
    rows = [r for task, condition, cdf, reference in _panels(kept)
            for r in _panel_auc(task, condition, cdf, reference, n_boot, seed, outside)]
    return pd.DataFrame(rows, columns=AUC_COLUMNS)


# --------------------------------------------------------------------------- atlas


def pruned_set(mask: list[list[int]]) -> frozenset[tuple[int, int]]:
    """The (layer, head) pairs a 0/1 ``[L][H]`` mask prunes (0 = pruned)."""
    return frozenset((i, j) for i, row in enumerate(mask) for j, v in enumerate(row) if not v)


def _sets(data: RunData, g: pd.DataFrame) -> dict[int, frozenset]:
    """Seed -> pruned head set of each row of ``g`` whose record has a mask."""
    return {int(s): pruned_set(data.records[int(i)].mask) for s, i in zip(g.seed, g.rec) if data.records[int(i)].mask}


def atlas_frames(data: RunData, kept: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(stability, agreement) of the prune-only masks (:data:`STABILITY_COLUMNS`, :data:`AGREEMENT_COLUMNS`)."""
    stab, agree = [], []
    for task, _, cdf, _ in _panels(kept[kept.condition == PRUNE_ONLY]):
        units = [u for u in sorted_units(list(cdf.unit.unique())) if kind_of(u) != "reference"]
        sets = {u: _sets(data, cdf[cdf.unit == u]) for u in units}
        total = int(pd.to_numeric(cdf.heads_total).max())
        for u in units:
            g = cdf[cdf.unit == u]
            stab.append({"task": task, "method": display_name(u), "budget": u.budget,
                         "level": float(_fractions(g).mean()), "n": len(sets[u]),
                         "jaccard": mean_pairwise_jaccard(list(sets[u].values())),
                         "random_expected": expected_mean_pairwise_jaccard(total, [len(x) for x in sets[u].values()])})
        for budget in sorted({u.budget for u in units if is_level(u.budget)}, key=budget_key):
            level = float(_fractions(cdf[cdf.budget == budget]).mean())
            at = [u for u in units if u.budget == budget]
            for a, b in itertools.permutations(at, 2):
                shared = sorted(set(sets[a]) & set(sets[b]))
                if shared:
                    agree.append({"task": task, "budget": budget, "level": level, "method_a": display_name(a),
                                  "method_b": display_name(b), "n": len(shared),
                                  "jaccard": float(np.mean([jaccard(sets[a][s], sets[b][s]) for s in shared]))})
    return pd.DataFrame(stab, columns=STABILITY_COLUMNS), pd.DataFrame(agree, columns=AGREEMENT_COLUMNS)


def curve_frames(data: RunData, n_boot: int = 10_000, seed: int = 0) -> CurveFrames:
    """The :class:`CurveFrames` of ``data``; empty frames (with their columns) when it holds no sweep
    (:func:`has_sweep`). ``n_boot``, ``seed``: the bootstrap of the area differences."""
    if not has_sweep(data):
        return CurveFrames(pd.DataFrame(columns=CURVES_COLUMNS), pd.DataFrame(columns=AUC_COLUMNS),
                           pd.DataFrame(columns=STABILITY_COLUMNS), pd.DataFrame(columns=AGREEMENT_COLUMNS))
    kept, failed = _kept(data)
    stability, agreement = atlas_frames(data, kept)
    outside = {u: SUPERSEDED for u in superseded_units(data, kept)}
    outside |= {u: NULL_CONTROL for u in kept.unit.unique() if u.name in NULL_CONTROLS.values()}
    return CurveFrames(curves_frame(kept), auc_frame(kept, n_boot, seed, outside), stability, agreement, failed)
