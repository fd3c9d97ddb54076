"""The analysis: per (task, condition group) table, each row's statistics and every paired comparison, as plain
dataclasses (:class:`GroupResult`, :class:`UnitStats`, :class:`Comparison`). Numbers here are percent points
(MCC x 100) except where a field says otherwise; nothing here formats text.

Choices where the issue is silent:

* Condition groups (protocol.md §4): ``prune+recover``, the headline, first (rows: original prune-only, control,
  the prune+recover units, and each re-training method's own weights, ``own-fine-tuning``); then ``prune-only``
  (rows: its units); then each repair condition ``prune+<repair>`` (rows: the original and its units; the
  original is its primary reference, as in prune-only). In the prune+recover group each unit is also compared
  with ``control``.
* Declared families (docs/protocol.md §5, :func:`family_kind`): every comparison belongs to one Holm family, named
  ``task/group/level/kind`` (:attr:`Comparison.family`). ``kind`` ``primary``: the methods of a level against the
  reference of their condition (original for prune-only, the control for prune+recover); ``pairwise``: pairs of
  those methods; ``vs-original`` (recovered rows and the control against the original), ``own-fine-tuning``,
  ``ablation`` (a side is an ablation, ``HeadPruner.ablation_of``) and ``vs-REF`` (other ``--against`` names) are
  secondary. A family is always split by budget level (:func:`holm_level`), so a primary p moves neither when a
  level, a recover run, an ablation nor another reference joins the folder.
* Base failures (protocol.md §6): a (task, seed) whose unpruned base model is degenerate (``base_failed``) leaves
  every row, comparison and average of that task, before any statistic; :attr:`GroupResult.base_failed_seeds`
  counts them. Degenerate *pruned* runs stay in every statistic (view ``"all"``, the headline) and are counted;
  view ``"survivors"`` also leaves out the pairs with a degenerate side: a labelled sensitivity view, biased in
  the pruning methods' favour, never the headline.
* Equal counts (protocol.md §3): a comparison of two pruned rows is a test only when both pruned the same number
  of heads on every common seed; otherwise it is listed with its count difference and no p-value
  (:attr:`Comparison.count_mismatch`), and it is not in the Holm family.
* Reference choice for "vs X": X's unit with the same budget and condition, else X's only unit in the group.
* Pairwise (:attr:`GroupResult.pairwise`): every pair of the group's pruned rows (original and control left
  out: they are the "vs" columns), the later row minus the earlier, in their own Holm family.
* ``against="all"``: every pair of rows in the "vs" family instead (the later row minus the earlier one).
* Null-reward controls (:data:`NULL_CONTROLS`, ``auber-null``): their rows are there for their head count, beside
  AUBER's; no claim is made about their scores, so their comparisons keep their exact p but stay out of every Holm
  family (:attr:`Comparison.in_family`): a control must not make the tests of the methods weaker (with 10 seeds
  the smallest exact p is 2/1024, and each comparison in a family multiplies it).
* Superseded rows (:attr:`GroupResult.superseded`): a row whose every record ran under an option set that a later
  ``bench run`` into its folder replaced (a method's options changed mid-run, and its cells ran again) stays in the
  tables, but its comparisons, like a null control's, give their exact p outside every Holm family: the family
  holds the experiment as it now stands, and a left-over row of one or two seeds must not weaken it.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report.groups import GROUPS, base_failed_seeds, group_frames
from headprune_bench.benchmark.report.load import RunData
from headprune_bench.benchmark.report.units import Unit, ablation_parent, budget_key, sorted_units, task_key
from headprune_bench.benchmark.stats import PairedStats
from headprune_bench.benchmark.store.records import CONTROL_NAME, ORIGINAL, OWN, PRUNE_ONLY, RECOVER, Record

__all__ = ["ALPHA", "DEFAULT_AGAINST", "GROUPS", "VIEWS", "Comparison", "GroupResult", "PairedStats", "SeedView",
           "TwoLevel", "Unit", "UnitStats", "analyse", "base_failed_seeds", "comparison_pairs", "declare_families",
           "family_id", "family_kind", "holm_level", "is_level", "pairwise_pairs", "pick_reference"]

VIEWS = ("all", "survivors")
"""The two seed sets of every statistic (base-failed seeds are already out): every seed, degenerate pruned runs
included (the headline); and the seeds without a degenerate side (a sensitivity view)."""
DEFAULT_AGAINST = (ORIGINAL, "auber")
"""The references every row is compared with unless the caller names others."""
ALPHA = 0.05
"""Significance level of the Holm-adjusted exact p-values (table markers, ``significant`` column)."""

NULL_CONTROLS = {"auber": "auber-null"}
"""A method whose head count the report prints beside its null-reward control's (protocol: AUBER sized so that its
count means something); the controls' comparisons are outside the Holm families."""
NULL_CONTROL = "null control"
SUPERSEDED = "superseded"
"""The two reasons (:attr:`Comparison.outside_family`) a test stays out of its Holm family."""


@dataclass
class UnitStats:
    """One row's scores over its seeds, in percent points.

    ``n``/``mean``/``sd`` over all seeds whose base model learned (sample SD, NaN with one seed), ``ci_low``/
    ``ci_high`` the Student-t 95% CI of the mean; ``*_survivors`` the same without degenerate seeds.
    ``heads_pruned``, ``layers_emptied`` (layers that lost every head) and ``wall_s`` are means,
    ``layers_emptied_max`` the most on one seed; ``degenerate`` a count; ``scores`` maps seed -> score;
    ``heads`` maps seed -> heads pruned; ``target`` the mean head target over the seeds that had one (NaN for none)
    and ``target_range`` its (min, max) over those seeds; ``off_budget`` the seeds whose pruned count differs from
    their own target; ``weights`` what the row evaluates (``Record.weights``, joined when seeds differ).
    """

    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    n_survivors: int
    mean_survivors: float
    sd_survivors: float
    heads_pruned: float
    degenerate: int
    scores: dict[int, float]
    wall_s: float
    target: float
    off_budget: int
    target_range: tuple[float, float] = (math.nan, math.nan)
    heads: dict[int, int] = field(default_factory=dict)
    layers_emptied: float = math.nan
    layers_emptied_max: int = 0
    weights: str = ""

    def view(self, which: str) -> tuple[int, float, float]:
        """(n, mean, sd) over ``which`` seeds: ``"all"`` or ``"survivors"``."""
        return ((self.n, self.mean, self.sd) if which == "all"
                else (self.n_survivors, self.mean_survivors, self.sd_survivors))


@dataclass
class TwoLevel:
    """Two-level (seeds, then dev examples) bootstrap of a mean difference, percent points; ``note`` says why
    the numbers are NaN (no predictions in the records, different dev labels, ...)."""

    estimate: float = math.nan
    low: float = math.nan
    high: float = math.nan
    note: str = ""


@dataclass
class SeedView:
    """A comparison over one seed set: its statistics, two-level CI and Holm-adjusted exact p (within the table)."""

    stats: PairedStats
    two_level: TwoLevel
    p_holm: float = math.nan


@dataclass
class Comparison:
    """``target - reference`` paired by seed; ``kind`` is the reference's name (``original``, ``auber``,
    ``control``, ...) or ``"pair"`` (pairwise, ``against="all"``); ``bad`` flags per common seed the pairs with a
    degenerate side, left out of the ``survivors`` view (``n_excluded`` of them); ``count_mismatch`` the common
    seeds on which both rows pruned heads but not the same number (then the comparison is not a test: its
    p-values stay NaN and it is not in a Holm family); ``outside_family`` says why a test gives its exact p
    outside the Holm family (``p_holm`` NaN): :data:`NULL_CONTROL` (a side is a null-reward control,
    :data:`NULL_CONTROLS`) or :data:`SUPERSEDED` (a side's every record ran under an option set that a later run
    into its folder replaced, ``RunData.superseded_records``); empty for a comparison in the family. ``level``:
    the budget level of its family (:func:`holm_level`); ``family``: its declared family's id
    (``task/group/level/kind``, :func:`family_kind`), set for every comparison, also those outside it."""

    target: Unit
    reference: Unit
    kind: str
    seeds: list[int]
    bad: list[bool]
    n_excluded: int
    all: SeedView
    survivors: SeedView
    count_mismatch: list[int] = field(default_factory=list)
    outside_family: str = ""
    level: str = ""
    family: str = ""

    @property
    def in_family(self) -> bool:
        """Whether the comparison belongs to its table's Holm family (``outside_family`` empty)."""
        return not self.outside_family

    @property
    def tested(self) -> bool:
        """Whether this comparison is a test: at least one paired seed, and equal head counts on each."""
        return bool(self.seeds) and not self.count_mismatch

    def view(self, which: str) -> SeedView:
        """The ``"all"`` or ``"survivors"`` seed set's view."""
        return self.all if which == "all" else self.survivors


@dataclass
class GroupResult:
    """Statistics of one (task, condition group) table: its rows (``units``, table order), each row's
    :class:`UnitStats`, its "vs" comparisons (one Holm family) and its ``pairwise`` comparisons (another).
    ``majority`` in percent points; ``heads_total`` the model's head count; ``seeds`` the seeds in the statistics;
    ``base_failed_seeds`` the seeds left out because the base model failed (protocol.md §6), ``failed_scores``
    what each row scored on them (percent points; shown apart, in no statistic), and ``superseded`` the rows whose
    every record ran under a replaced option set (their comparisons outside the Holm families)."""

    task: str
    group: str
    metric: str
    heads_total: float
    majority: float
    seeds: list[int]
    units: list[Unit]
    unit_stats: dict[Unit, UnitStats]
    comparisons: list[Comparison]
    pairwise: list[Comparison] = field(default_factory=list)
    base_failed_seeds: list[int] = field(default_factory=list)
    failed_scores: dict[Unit, dict[int, float]] = field(default_factory=dict)
    superseded: list[Unit] = field(default_factory=list)

    @property
    def references(self) -> list[str]:
        """The reference names (comparison kinds other than "pair") of this table, in order of appearance."""
        return list(dict.fromkeys(c.kind for c in self.comparisons if c.kind != "pair"))

    def comparison(self, target: Unit, kind: str) -> Comparison | None:
        """The comparison of ``target`` with reference ``kind``, if any."""
        return next((c for c in self.comparisons if c.target == target and c.kind == kind), None)


# --------------------------------------------------------------------------- which comparisons


def is_level(budget: str) -> bool:
    """Whether a budget spec is a fixed level of a sweep: ``fraction:X`` or ``heads:K`` (any ``/floor:M``)."""
    return str(budget).split(":", 1)[0] in ("fraction", "heads")


def holm_level(c: Comparison) -> str:
    """The budget level of ``c``'s Holm family: the row's budget; for a pair of rows at two budgets, both
    (``A vs B``, in budget order)."""
    if c.kind != "pair" or c.reference.name in (ORIGINAL, CONTROL_NAME) or c.target.budget == c.reference.budget:
        return c.target.budget
    return " vs ".join(sorted((c.target.budget, c.reference.budget), key=budget_key))


PRIMARY, PAIRWISE, VS_ORIGINAL, OWN_FAMILY, ABLATION = "primary", "pairwise", "vs-original", OWN, "ablation"
"""Family kinds (:func:`family_kind`); other references give ``vs-NAME``."""
REFERENCE_OF = {PRUNE_ONLY: ORIGINAL, RECOVER: CONTROL_NAME}
"""The reference of each condition group's primary family."""


def family_kind(c: Comparison, group: str) -> str:
    """The kind of ``c``'s declared family in condition group ``group``: :data:`ABLATION` when a side is an ablation
    (:func:`units.ablation_parent`), else :data:`OWN_FAMILY` when a side evaluates a method's own weights, else
    :data:`PAIRWISE` for a pair, :data:`PRIMARY` against the group's reference (:data:`REFERENCE_OF`),
    :data:`VS_ORIGINAL` for a recovered row against the original, ``vs-NAME`` against another reference."""
    sides = (c.target, c.reference)
    if any(ablation_parent(u.name) for u in sides):
        return ABLATION
    if any(u.condition == OWN for u in sides):
        return OWN_FAMILY
    if c.kind == "pair":
        return PAIRWISE
    if c.kind == REFERENCE_OF.get(group, ORIGINAL) and c.target.name not in (ORIGINAL, CONTROL_NAME):
        return PRIMARY
    return VS_ORIGINAL if c.kind == ORIGINAL else f"vs-{c.kind}"


def family_id(task: str, group: str, level: str, kind: str) -> str:
    """``task/group/level/kind``, e.g. ``rte/prune-only/fraction:0.3/primary``."""
    return f"{task}/{group}/{level}/{kind}"


def declare_families(comparisons: list[Comparison], task: str, group: str) -> list[list[Comparison]]:
    """Set each comparison's ``level`` and ``family`` (:func:`holm_level`, :func:`family_kind`) and return the
    families, in order of first appearance."""
    for c in comparisons:
        c.level = holm_level(c)
        c.family = family_id(task, group, c.level, family_kind(c, group))
    return [[c for c in comparisons if c.family == f] for f in dict.fromkeys(c.family for c in comparisons)]


def pick_reference(target: Unit, refs: list[Unit]) -> Unit | None:
    """The reference row for ``target`` among one reference method's rows ``refs``: the one with the same
    budget and condition, else the only one with the same condition, else the only one; None if ambiguous."""
    same = [r for r in refs if r.budget == target.budget and r.condition == target.condition]
    if len(same) == 1:
        return same[0]
    cond = [r for r in refs if r.condition == target.condition]
    if len(cond) == 1:
        return cond[0]
    return refs[0] if len(refs) == 1 else None


def pairwise_pairs(units: list[Unit]) -> list[tuple[Unit, Unit, str]]:
    """(target, reference, "pair") of every pair of pruned rows (original and control left out), the later row
    minus the earlier one."""
    pruned = [u for u in units if u.name not in (ORIGINAL, CONTROL_NAME)]
    return [(pruned[j], pruned[i], "pair") for i in range(len(pruned)) for j in range(i + 1, len(pruned))]


def _all_pairs(units: list[Unit]) -> list[tuple[Unit, Unit, str]]:
    """Every pair once; the reference is the earlier row unless the later row is a named reference."""
    rank = {name: i for i, name in enumerate((ORIGINAL, CONTROL_NAME, *DEFAULT_AGAINST[1:]))}
    pairs = []
    for i in range(len(units)):
        for j in range(i + 1, len(units)):
            target, ref = units[j], units[i]
            if rank.get(target.name, 9) < rank.get(ref.name, 9):
                target, ref = ref, target
            pairs.append((target, ref, ref.name if ref.name in rank else "pair"))
    return pairs


def comparison_pairs(units: list[Unit], group: str, against: Sequence[str] | str) -> list[tuple[Unit, Unit, str]]:
    """(target, reference, kind) of every comparison of a table; ``kind`` is the reference name or "pair".

    ``against``: reference method names, or ``"all"`` (or a sequence holding it) for every pair of rows. The
    reference of the group's primary family is always one: ``control`` in prune+recover, ``original`` in
    prune-only.
    """
    if against == "all" or (not isinstance(against, str) and "all" in against):
        return _all_pairs(units)
    names = [against] if isinstance(against, str) else list(against)
    if CONTROL_NAME not in names and group == RECOVER:
        names.append(CONTROL_NAME)
    if ORIGINAL not in names and group != RECOVER:  # the primary reference, whatever --against names
        names.insert(0, ORIGINAL)
    pairs: list[tuple[Unit, Unit, str]] = []
    seen: set[tuple[Unit, Unit]] = set()
    for name in names:
        refs = [u for u in units if u.name == name and (name != ORIGINAL or u.condition == PRUNE_ONLY)]
        for target in units if refs else ():
            if target.name == name or (name != ORIGINAL and target.name in (ORIGINAL, CONTROL_NAME)):
                continue
            ref = refs[0] if name == ORIGINAL else pick_reference(target, refs)
            if ref is None or (target, ref) in seen:
                continue
            seen.add((target, ref))
            pairs.append((target, ref, name))
    return pairs


# --------------------------------------------------------------------------- statistics


def unit_stats(g: pd.DataFrame) -> UnitStats:
    """:class:`UnitStats` of one unit's rows of the frame (one row per seed, sorted by seed; base-failed seeds
    already left out)."""
    pp = 100 * g.score.to_numpy()
    survived = ~g.degenerate.to_numpy(dtype=bool)
    d_all, d_survivors = stats.describe(pp), stats.describe(pp[survived])
    low, high = stats.mean_ci_t(pp)
    target = pd.to_numeric(g.target, errors="coerce")
    pruned = pd.to_numeric(g.heads_pruned, errors="coerce")
    has = target.notna()
    return UnitStats(n=d_all["n"], mean=d_all["mean"], sd=d_all["sd"], ci_low=low, ci_high=high,
                     n_survivors=d_survivors["n"], mean_survivors=d_survivors["mean"], sd_survivors=d_survivors["sd"],
                     heads_pruned=float(pruned.mean()), degenerate=int(g.degenerate.sum()),
                     scores=dict(zip(g.seed.astype(int), pp)), wall_s=float(pd.to_numeric(g.wall_s).mean()),
                     target=float(target[has].mean()) if has.any() else math.nan,
                     off_budget=int((has & (pruned != target)).sum()),
                     target_range=(float(target[has].min()), float(target[has].max())) if has.any()
                     else (math.nan, math.nan),
                     heads=dict(zip(g.seed.astype(int), pruned.astype(int))),
                     layers_emptied=float(pd.to_numeric(g.layers_emptied).mean()),
                     layers_emptied_max=int(pd.to_numeric(g.layers_emptied).max()) if len(g) else 0,
                     weights=", ".join(dict.fromkeys(str(w) for w in g.weights)))


def _predictions(records: list[Record], rows: pd.DataFrame) -> tuple[list, list] | None:
    """(predictions, labels) per row's record; None when a record has none."""
    preds, labels = [], []
    for i in rows.rec:
        r = records[int(i)]
        if not r.predictions or not r.labels:
            return None
        preds.append(r.predictions)
        labels.append(r.labels)
    return preds, labels


def _two_level(pa: tuple | None, pb: tuple | None, keep: np.ndarray, metric: str, n_boot: int,
               seed: int) -> TwoLevel:
    """The two-level bootstrap over the kept seeds (percent points), or NaNs with the reason."""
    if pa is None or pb is None or metric not in stats.METRICS:
        return TwoLevel(note="no predictions in the records")
    sel = np.flatnonzero(keep)
    try:
        if any(list(pa[1][i]) != list(pb[1][i]) for i in sel):
            raise ValueError("the two records of a seed hold different dev labels")
        two = stats.two_level_bootstrap([pa[0][i] for i in sel], [pb[0][i] for i in sel],
                                        [pa[1][i] for i in sel], metric, n_boot=n_boot, seed=seed)
    except ValueError as exc:  # e.g. the two records of a seed scored different dev sets
        return TwoLevel(note=str(exc))
    return TwoLevel(100 * two["estimate"], 100 * two["low"], 100 * two["high"], two.get("note", ""))


def compare_units(data: RunData, df: pd.DataFrame, target: Unit, ref: Unit, kind: str, metric: str, n_boot: int,
                  n_boot_examples: int, seed: int) -> Comparison:
    """The :class:`Comparison` ``target - ref`` over their common seeds in ``df`` (one table's frame); the Holm
    p-values are left NaN (set by :func:`analyse` over the whole table)."""
    a = df[df.unit == target].set_index("seed")
    b = df[df.unit == ref].set_index("seed")
    common = sorted(set(a.index) & set(b.index))
    a, b = a.loc[common], b.loc[common]
    bad = a.degenerate.to_numpy(dtype=bool) | b.degenerate.to_numpy(dtype=bool)
    ha, hb = a.heads_pruned.to_numpy(dtype=int), b.heads_pruned.to_numpy(dtype=int)
    unpruned = {ORIGINAL, CONTROL_NAME}  # the references every pruned row is compared with, whatever its count
    both_pruned = target.name not in unpruned and ref.name not in unpruned
    mismatch = [int(s) for s, x, y in zip(common, ha, hb) if both_pruned and x != y]
    res = stats.compare_with_without(100 * a.score.to_numpy(), 100 * b.score.to_numpy(), bad, n_boot=n_boot, seed=seed)
    if mismatch:  # not a test: rows of different head counts are never compared as if equal (protocol §3)
        for which in ("all", "clean"):
            view = getattr(res, which)
            notes = "; ".join(x for x in (view.notes, f"head counts differ on seed(s) {mismatch}: no test") if x)
            setattr(res, which, dataclasses.replace(view, p_exact=math.nan, p_wilcoxon=math.nan, p_t=math.nan,
                                                    notes=notes))
    pa, pb = _predictions(data.records, a.reset_index()), _predictions(data.records, b.reset_index())
    two_all = _two_level(pa, pb, np.ones(len(common), bool), metric, n_boot_examples, seed)
    # no seed excluded: the same resamples
    two_survivors = two_all if (~bad).all() else _two_level(pa, pb, ~bad, metric, n_boot_examples, seed)
    return Comparison(target=target, reference=ref, kind=kind, seeds=common, bad=bad.tolist(),
                      n_excluded=res.n_excluded, all=SeedView(res.all, two_all),
                      survivors=SeedView(res.clean, two_survivors), count_mismatch=mismatch)


def _scores_of(frame: pd.DataFrame) -> dict[Unit, dict[int, float]]:
    """Each unit's score per seed in ``frame`` (percent points)."""
    return {u: dict(zip(g.seed.astype(int), 100 * g.score.to_numpy())) for u, g in frame.groupby("unit", sort=False)}


def _holm(comparisons: list[Comparison]) -> None:
    """Set each comparison's Holm-adjusted p per seed view; one family: ``comparisons`` (untested ones and those
    outside the family, ``in_family`` False, left out)."""
    comparisons = [c for c in comparisons if c.in_family]
    for which in VIEWS:
        adjusted, _ = stats.holm([c.view(which).stats.p_exact for c in comparisons])
        for c, p in zip(comparisons, adjusted):
            c.view(which).p_holm = float(p)


def analyse(data: RunData, against: Sequence[str] | str = DEFAULT_AGAINST, n_boot: int = 10_000,
            n_boot_examples: int = 1000, seed: int = 0) -> list[GroupResult]:
    """Statistics of every (task, condition group) in ``data``, tasks in report order; Holm within each declared
    family (:func:`declare_families`).

    Args:
        data: the loaded runs (:func:`headprune_bench.benchmark.report.load.load_runs`).
        against: reference method names, or ``"all"`` for every pair of rows (:func:`comparison_pairs`).
        n_boot: bootstrap replicates over seeds; ``n_boot_examples``: of the two-level bootstrap; ``seed``: their
            RNG seed (the same for every comparison).
    """
    results: list[GroupResult] = []
    df = data.frame
    for task in sorted(df.task.unique(), key=task_key) if not df.empty else ():
        tdf = df[df.task == task]
        failed = base_failed_seeds(tdf)
        for group, gdf in group_frames(tdf):
            kept = gdf[~gdf.seed.isin(failed)]
            units = sorted_units(gdf.unit.unique())
            metric = gdf.metric.iloc[0]
            def compare(pairs, kept=kept, metric=metric):
                return [compare_units(data, kept, t, r, k, metric, n_boot, n_boot_examples, seed) for t, r, k in pairs]

            comparisons = compare(comparison_pairs(units, group, against))
            taken = {frozenset((c.target, c.reference)) for c in comparisons}  # one test, one family
            pairwise = [] if against == "all" else compare(
                [p for p in pairwise_pairs(units) if frozenset(p[:2]) not in taken])
            superseded = superseded_units(data, gdf)
            for c in (*comparisons, *pairwise):
                c.outside_family = _outside_family(c, superseded)
            for family in declare_families([*comparisons, *pairwise], task, group):
                _holm(family)
            results.append(GroupResult(
                task=task, group=group, metric=metric, heads_total=float(pd.to_numeric(gdf.heads_total).max()),
                majority=100 * float(gdf.majority.median()), seeds=sorted(int(s) for s in kept.seed.unique()),
                units=units, unit_stats={u: unit_stats(kept[kept.unit == u].sort_values("seed")) for u in units},
                comparisons=comparisons, pairwise=pairwise,
                base_failed_seeds=sorted(set(failed) & {int(s) for s in gdf.seed.unique()}),
                failed_scores=_scores_of(gdf[gdf.seed.isin(failed)]),
                superseded=[u for u in units if u in superseded]))
    return results


def superseded_units(data: RunData, frame: pd.DataFrame) -> set[Unit]:
    """The units of ``frame`` (rows of ``data.frame``) whose every record is in ``data.superseded_records``."""
    return {u for u, g in frame.groupby("unit", sort=False)
            if all(data.records[int(i)].cell in data.superseded_records for i in g.rec)}


def _outside_family(c: Comparison, superseded: set[Unit]) -> str:
    """Why ``c`` stays out of its Holm family (:attr:`Comparison.outside_family`), or "" when it does not."""
    controls = set(NULL_CONTROLS.values())
    if c.target.name in controls or c.reference.name in controls:
        return NULL_CONTROL
    if c.target in superseded or c.reference in superseded:
        return SUPERSEDED
    return ""
