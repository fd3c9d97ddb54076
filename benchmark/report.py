"""``bench report``: significance tests, comparison tables and plots of one or more run folders.

Input: run folders holding ``records.jsonl`` (one record per finished cell) and possibly ``failures.jsonl``.
Several folders are combined by concatenating their records; a cell key seen twice is kept once (the first
folder given wins) with a :class:`ReportWarning`.

Units of comparison: a *unit* is (method, budget spec, condition) - plus the method options hash when one
method ran with several option sets at the same budget. The unpruned model in the ``control`` condition is the
unit ``control``. Units are paired by (task, seed); statistics come from :mod:`benchmark.stats`.

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

Choices where the issue is silent (documented here so a reader can check them):

* Condition groups: ``prune-only`` (rows: its units) and ``prune+recover`` (rows: original prune-only, control,
  the prune+recover units); the Holm family is one (task, group) table, so prune-only results do not change
  when a recover run is added. In the prune+recover group each unit is also compared with ``control``.
* Reference choice for "vs X": X's unit with the same budget and condition, else X's only unit in the group.
* ``--against all``: every pair of rows (the later row minus the earlier one), all in one Holm family.
* Score error bars in plots are Student-t 95% CIs of the mean over seeds; difference CIs are percentile
  bootstrap over seeds (protocol.md §5).
* The cross-task average of a unit is over the non-WNLI tasks it ran on; the ``tasks`` column says how many.
"""
from __future__ import annotations

import json
import logging
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import click
import numpy as np
import pandas as pd

from benchmark import stats
from benchmark.store import FAILURES, PLANS, RECORDS, REJECTED, BrokenLine, record_key, scan_jsonl

log = logging.getLogger("benchmark")

__all__ = ["ReportWarning", "Unit", "RunData", "load_runs", "analyse", "build_report", "report_cmd",
           "METHOD_COLORS", "method_color"]

ORIGINAL, CONTROL_NAME = "original", "control"
PRUNE_ONLY, RECOVER, CONTROL = "prune-only", "prune+recover", "control"
GROUPS = (PRUNE_ONLY, RECOVER)
TASK_ORDER = ("mrpc", "cola", "rte", "wnli")
EXCLUDED_FROM_AVERAGE = ("wnli",)
METHOD_ORDER = ("original", "control", "random", "confidence", "michel", "voita", "dsp", "redundancy", "auber")
METRIC_LABEL = {"accuracy": "acc", "matthews_correlation": "MCC", "f1": "F1"}
METRIC_AXIS = {"accuracy": "accuracy (%)", "matthews_correlation": "MCC × 100", "f1": "F1 (%)"}
#: Significance marker per reference (Holm-adjusted exact p < ALPHA); other references get "*".
MARKERS = {"original": "†", "auber": "‡", "control": "§"}
ALPHA = 0.05

#: Okabe & Ito (2008) colour-blind-safe palette; one fixed colour per known method.
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky_blue": "#56B4E9", "green": "#009E73",
             "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7"}
METHOD_COLORS = {"original": OKABE_ITO["black"], "control": "#777777", "random": "#AAAAAA",
                 "confidence": OKABE_ITO["orange"], "michel": OKABE_ITO["sky_blue"], "voita": OKABE_ITO["green"],
                 "dsp": OKABE_ITO["blue"], "redundancy": OKABE_ITO["purple"], "auber": OKABE_ITO["vermillion"]}
#: For other methods (ablations, new methods): Paul Tol's colour-blind-safe "muted" scheme, then Okabe-Ito yellow.
EXTRA_COLORS = ("#332288", "#117733", "#882255", "#44AA99", "#999933", "#AA4499", "#88CCEE", "#DDCC77",
                OKABE_ITO["yellow"])
MARKER_CYCLE = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")


class ReportWarning(UserWarning):
    """Something a reader of the report should know about its input (duplicate cells, unreadable folders)."""



def _task_label(task: str) -> str:
    """GLUE's spelling of a task name (``cola`` -> ``CoLA``)."""
    from benchmark.tasks import TASKS

    return TASKS[task].glue_dir if task in TASKS else task.upper()

def _warn(message: str) -> None:
    warnings.warn(message, ReportWarning, stacklevel=3)
    log.warning(message)


# --------------------------------------------------------------------------- units and ordering


def _budget_key(spec: str) -> tuple:
    kind, _, value = str(spec).partition(":")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    order = {"none": 0, "fraction": 1, "heads": 2, "matched": 3}.get(kind, 4)
    return (order, 0 if math.isnan(number) else number, value)


def short_budget(spec: str) -> str:
    """``fraction:0.3`` -> ``30%``, ``heads:12`` -> ``12 heads``, ``matched:auber`` -> ``= auber``, ``none`` -> ``''``."""
    kind, _, value = str(spec).partition(":")
    if kind == "none" or not spec:
        return ""
    if kind == "fraction":
        try:
            return f"{100 * float(value):g}%"
        except ValueError:
            return spec
    if kind == "heads":
        return f"{value} heads"
    if kind == "matched":
        return f"= {value}"
    return spec


def _method_rank(name: str) -> tuple:
    if name in METHOD_ORDER:
        return (METHOD_ORDER.index(name), "")
    base = name.split("-")[0]
    if base in METHOD_ORDER:  # ablations (auber-l2) right after their method
        return (METHOD_ORDER.index(base) + 0.5, name)
    return (len(METHOD_ORDER), name)


@dataclass(frozen=True)
class Unit:
    """A row of a table: (method, budget spec, condition[, options hash]).

    ``name`` is the method, or ``"control"`` for the unpruned model in the control condition.
    """

    name: str
    method: str
    budget: str
    condition: str
    opts: str | None = None

    @property
    def label(self) -> str:
        """Human label, e.g. ``michel [fraction:0.3]``, ``auber [matched:auber] (prune+recover)``."""
        text = self.name
        if self.budget not in ("none", ""):
            text += f" [{self.budget}]"
        if self.opts:
            text += f" opts={self.opts}"
        if self.condition == RECOVER:
            text += " +recover"
        return text

    @property
    def sort_key(self) -> tuple:
        cond = {PRUNE_ONLY: 0, CONTROL: 1, RECOVER: 2}.get(self.condition, 3)
        original_first = 0 if self.name == ORIGINAL else 1 if self.name == CONTROL_NAME else 2
        return (original_first, _method_rank(self.name), _budget_key(self.budget), self.opts or "", cond)

    def group(self) -> str:
        return RECOVER if self.condition in (RECOVER, CONTROL) else PRUNE_ONLY


def method_color(name: str, known: Sequence[str] = ()) -> str:
    """Colour of a method (same in every plot): fixed for known methods, else by its rank among ``known``."""
    if name in METHOD_COLORS:
        return METHOD_COLORS[name]
    extras = sorted({m for m in known if m not in METHOD_COLORS} | {name}, key=_method_rank)
    return EXTRA_COLORS[extras.index(name) % len(EXTRA_COLORS)]


def _task_key(task: str) -> tuple:
    return (TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER), task)


# --------------------------------------------------------------------------- loading


@dataclass
class RunData:
    """Records of one or more run folders, de-duplicated by cell key.

    ``frame`` has one row per record (scores as fractions) with the :class:`Unit` in column ``unit`` and the
    record's position in ``records`` in column ``rec``.
    """

    folders: list[Path]
    records: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    duplicates: list[str] = field(default_factory=list)
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: planned cell keys per folder (from ``runs.jsonl``; a folder made by an older runner has none)
    planned: dict[Path, list[str]] = field(default_factory=dict)
    #: unreadable lines of the folders' JSONL files (skipped, each named in a warning and in the report)
    broken: list[BrokenLine] = field(default_factory=list)


def _opts_of(record: dict[str, Any]) -> str:
    cell = str(record.get("cell", ""))
    if "|opts=" in cell:
        return cell.rsplit("|opts=", 1)[1]
    options = record.get("method_options") or {}
    return json.dumps(options, sort_keys=True) if options else "-"


#: What skipping an unreadable line of each file means for the report.
_BROKEN_CONSEQUENCE = {
    RECORDS: "If it was a record, its cell is listed as missing.",
    FAILURES: "If it was a failure, its cell is listed as missing, not failed.",
    PLANS: "If it was a `bench run` entry, the cells only it planned are not listed as missing.",
}


def load_runs(folders: Sequence[str | Path]) -> RunData:
    """Read and combine the ``records.jsonl`` / ``failures.jsonl`` of ``folders``.

    A cell key seen twice is kept once (first occurrence) and reported in one :class:`ReportWarning` (louder
    when the duplicates' scores differ). A folder without ``records.jsonl`` is warned about and skipped.
    Failures whose cell has a record (it succeeded on a later try) are dropped. An unreadable line
    (:func:`benchmark.store.scan_jsonl`: an interrupted write, invalid JSON, not a record) is skipped and named in a
    :class:`ReportWarning` (file, line, reason, what follows); ``RunData.broken`` lists them. A record's cell is then
    missing, and the next ``bench run`` into the folder moves the line to ``rejected.jsonl`` and computes it again.

    Raises:
        FileNotFoundError: a folder does not exist, or is not a run folder (neither records.jsonl nor run.json).
    """
    paths = [Path(f) for f in folders]
    planned: dict[Path, list[str]] = {}
    records: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    seen: dict[str, dict[str, Any]] = {}
    duplicates: list[str] = []
    differing: list[str] = []
    all_broken: list[BrokenLine] = []
    for folder in paths:
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: no such run folder")
        if not (folder / RECORDS).exists():
            if not (folder / "run.json").exists():
                raise FileNotFoundError(f"{folder}: not a run folder (no {RECORDS} and no run.json); give the --out "
                                        f"folder of a `bench run`")
            _warn(f"{folder}: no {RECORDS} (nothing finished yet?)")
        recs, broken = scan_jsonl(folder / RECORDS)
        fails, broken_f = scan_jsonl(folder / FAILURES)
        plans, broken_p = scan_jsonl(folder / PLANS)
        for b in broken + broken_f + broken_p:
            _warn(f"{b}: skipped. {_BROKEN_CONSEQUENCE[b.path.name]} The next `bench run` into {folder} moves "
                  f"the line to {REJECTED} (kept there) and computes any missing cell again.")
        all_broken += broken + broken_f + broken_p
        for rec in recs:
            key = record_key(rec)
            if key in seen:
                duplicates.append(key)
                if seen[key].get("score") != rec.get("score"):
                    differing.append(key)
                continue
            rec = dict(rec, cell=key)
            seen[key] = rec
            records.append(rec)
        failures.extend(fails)
        if plans:
            planned[folder] = list(dict.fromkeys(k for p in plans for k in p.get("cells", [])))
    if duplicates:
        shown = ", ".join(duplicates[:3]) + (" ..." if len(duplicates) > 3 else "")
        msg = f"{len(duplicates)} duplicate cell(s) across the folders kept once (first folder wins): {shown}"
        if differing:
            msg += f"; {len(differing)} of them with DIFFERENT scores (e.g. {differing[0]}): check the runs match"
        _warn(msg)
    latest: dict[str, dict[str, Any]] = {}
    for f in failures:
        if f.get("cell") not in seen:
            latest[f.get("cell", repr(f))] = f
    data = RunData(folders=paths, records=records, failures=list(latest.values()), duplicates=duplicates,
                   planned=planned, broken=all_broken)
    data.frame = _frame(records)
    return data


def _target_of(record: dict[str, Any]) -> float:
    """The head count a cell was asked to prune (NaN when it decided its own, or for the unpruned model)."""
    target = (record.get("budget") or {}).get("target")
    return float(target) if isinstance(target, (int, float)) and not isinstance(target, bool) else math.nan


def _frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    columns = ["task", "seed", "method", "budget", "condition", "opts", "unit", "score", "metric", "majority",
               "degenerate", "base_failed", "heads_pruned", "heads_total", "target", "wall_s", "prune_wall_s",
               "forward_examples", "backward_examples", "device", "rec"]
    if not records:
        return pd.DataFrame(columns=columns)
    rows = []
    for i, r in enumerate(records):
        cost = r.get("cost") or {}
        metric = r["primary_metric"]
        rows.append({
            "task": r["task"], "seed": int(r["seed"]), "method": r["method"],
            "budget": (r.get("budget") or {}).get("spec", "none"), "condition": r["condition"], "opts": _opts_of(r),
            "score": float(r["score"]), "metric": metric,
            "majority": float((r.get("majority_baseline") or {}).get(metric, math.nan)),
            "degenerate": bool(r.get("degenerate", False)), "base_failed": bool(r.get("base_failed", False)),
            "heads_pruned": r.get("heads_pruned", math.nan), "heads_total": r.get("heads_total", math.nan),
            "target": _target_of(r),
            "wall_s": cost.get("wall_s", math.nan), "prune_wall_s": cost.get("prune_wall_s", math.nan),
            "forward_examples": cost.get("forward_examples", math.nan),
            "backward_examples": cost.get("backward_examples", math.nan), "device": cost.get("device", ""), "rec": i,
        })
    df = pd.DataFrame(rows)
    # the options hash is part of a unit wherever its method ran with several option sets in these folders (at any
    # budget: a sweep must not join points of two configurations); `option_sets` says how the sets differ
    n_opts = df.groupby("method")["opts"].transform("nunique")
    df["unit"] = [Unit(CONTROL_NAME if c == CONTROL else m, m, b, c, o if k > 1 else None)
                  for m, b, c, o, k in zip(df.method, df.budget, df.condition, df.opts, n_opts)]
    dup = df.duplicated(["task", "seed", "unit"], keep="first")
    if dup.any():
        _warn(f"{int(dup.sum())} record(s) repeat a (task, seed, unit) under another cell key; first kept")
        df = df[~dup]
    return df[columns].reset_index(drop=True)


# --------------------------------------------------------------------------- analysis


@dataclass
class GroupResult:
    """Statistics of one (task, condition group) table. Scores here are fractions; display multiplies by 100."""

    task: str
    group: str
    metric: str
    heads_total: float
    majority: float
    seeds: list[int]
    units: list[Unit]
    unit_stats: dict[Unit, dict[str, Any]]
    comparisons: list[dict[str, Any]]

    @property
    def references(self) -> list[str]:
        out: list[str] = []
        for c in self.comparisons:
            if c["kind"] != "pair" and c["kind"] not in out:
                out.append(c["kind"])
        return out


def _pick_reference(target: Unit, refs: list[Unit]) -> Unit | None:
    same = [r for r in refs if r.budget == target.budget and r.condition == target.condition]
    if len(same) == 1:
        return same[0]
    cond = [r for r in refs if r.condition == target.condition]
    if len(cond) == 1:
        return cond[0]
    return refs[0] if len(refs) == 1 else None


def _comparison_pairs(units: list[Unit], group: str, against: Sequence[str] | str) -> list[tuple[Unit, Unit, str]]:
    """(target, reference, kind) of every comparison of a table; ``kind`` is the reference name or "pair"."""
    if against == "all" or (not isinstance(against, str) and "all" in against):
        # every pair once; the reference is the earlier row unless the later row is a named reference
        rank = {ORIGINAL: 0, CONTROL_NAME: 1, "auber": 2}
        pairs = []
        for i in range(len(units)):
            for j in range(i + 1, len(units)):
                target, ref = units[j], units[i]
                if rank.get(target.name, 9) < rank.get(ref.name, 9):
                    target, ref = ref, target
                pairs.append((target, ref, ref.name if ref.name in rank else "pair"))
        return pairs
    names = [against] if isinstance(against, str) else list(against)
    if group == RECOVER and CONTROL_NAME not in names:
        names.append(CONTROL_NAME)
    pairs: list[tuple[Unit, Unit, str]] = []
    seen: set[tuple[Unit, Unit]] = set()
    for name in names:
        refs = [u for u in units if u.name == name]
        if name == ORIGINAL:
            refs = [u for u in refs if u.condition == PRUNE_ONLY]
        if not refs:
            continue
        for target in units:
            if target.name == name or (name != ORIGINAL and target.name in (ORIGINAL, CONTROL_NAME)):
                continue
            ref = refs[0] if name == ORIGINAL else _pick_reference(target, refs)
            if ref is None or (target, ref) in seen:
                continue
            seen.add((target, ref))
            pairs.append((target, ref, name))
    return pairs


def _unit_stats(g: pd.DataFrame) -> dict[str, Any]:
    pp = 100 * g.score.to_numpy()
    clean = ~(g.degenerate.to_numpy() | g.base_failed.to_numpy())
    d_all, d_clean = stats.describe(pp), stats.describe(pp[clean])
    low, high = stats.mean_ci_t(pp)
    return {"n": d_all["n"], "mean": d_all["mean"], "sd": d_all["sd"], "ci_low": low, "ci_high": high,
            "n_clean": d_clean["n"], "mean_clean": d_clean["mean"], "sd_clean": d_clean["sd"],
            "heads_pruned": float(pd.to_numeric(g.heads_pruned).mean()),
            "degenerate": int(g.degenerate.sum()), "base_failed": int(g.base_failed.sum()),
            "scores": dict(zip(g.seed.astype(int), pp)), "wall_s": float(pd.to_numeric(g.wall_s).mean()),
            "base_failed_seeds": sorted(int(x) for x in g.seed[g.base_failed.astype(bool)]),
            **_budget_stats(g)}


def _budget_stats(g: pd.DataFrame) -> dict[str, Any]:
    """How the cells of a unit met their head budget: ``target`` (mean target over the seeds that had one, NaN
    for none) and ``off_budget`` (seeds whose pruned count differs from their target)."""
    target = pd.to_numeric(g.target, errors="coerce") if "target" in g else pd.Series(math.nan, index=g.index)
    pruned = pd.to_numeric(g.heads_pruned, errors="coerce")
    has = target.notna()
    return {"target": float(target[has].mean()) if has.any() else math.nan,
            "off_budget": int((has & (pruned != target)).sum())}


def heads_cell(s: dict[str, Any], heads_total: float) -> str:
    """The "heads pruned" cell of a table row: mean pruned / total, flagged when some seed missed its target
    (e.g. ``0.0/72 ⚠ target 22, missed on 3/3 seeds``), so an off-budget row is never read as on budget."""
    total = int(heads_total) if np.isfinite(heads_total) else "?"
    text = f"{_num(s['heads_pruned'], 1)}/{total}"
    if s.get("off_budget"):
        text += f" ⚠ target {_num(s['target'], 1 if s['target'] % 1 else 0)}, missed on {s['off_budget']}/{s['n']} seeds"
    return text


def _predictions(data: RunData, rows: pd.DataFrame) -> tuple[list, list] | None:
    preds, labels = [], []
    for i in rows.rec:
        r = data.records[int(i)]
        if r.get("predictions") is None or r.get("labels") is None:
            return None
        preds.append(r["predictions"])
        labels.append(r["labels"])
    return preds, labels


def _compare_units(data: RunData, df: pd.DataFrame, target: Unit, ref: Unit, metric: str, n_boot: int,
                   n_boot_examples: int, seed: int) -> dict[str, Any]:
    a = df[df.unit == target].set_index("seed")
    b = df[df.unit == ref].set_index("seed")
    common = sorted(set(a.index) & set(b.index))
    a, b = a.loc[common], b.loc[common]
    bad = (a.degenerate.to_numpy() | a.base_failed.to_numpy() | b.degenerate.to_numpy() | b.base_failed.to_numpy())
    res = stats.compare_with_without(100 * a.score.to_numpy(), 100 * b.score.to_numpy(), bad, n_boot=n_boot, seed=seed)
    out = {"target": target, "reference": ref, "seeds": common, "bad": bad.tolist(), **res}
    pa, pb = _predictions(data, a.reset_index()), _predictions(data, b.reset_index())
    two_level: dict[str, dict[str, Any]] = {}
    for which, keep in (("all", np.ones(len(common), bool)), ("clean", ~bad)):
        if which == "clean" and keep.all():
            two_level["clean"] = two_level["all"]  # no seed excluded: the same resamples
            continue
        two = {"estimate": math.nan, "low": math.nan, "high": math.nan, "note": "no predictions in the records"}
        if pa is not None and pb is not None and metric in stats.METRICS:
            sel = np.flatnonzero(keep)
            try:
                if any(list(pa[1][i]) != list(pb[1][i]) for i in sel):
                    raise ValueError("the two records of a seed hold different dev labels")
                two = stats.two_level_bootstrap([pa[0][i] for i in sel], [pb[0][i] for i in sel],
                                                [pa[1][i] for i in sel], metric, n_boot=n_boot_examples, seed=seed)
            except ValueError as exc:  # e.g. the two records of a seed scored different dev sets
                two = {"estimate": math.nan, "low": math.nan, "high": math.nan, "note": str(exc)}
        two_level[which] = {k: (100 * v if k in ("estimate", "low", "high") else v) for k, v in two.items()}
    out["two_level"] = two_level
    return out


def analyse(data: RunData, against: Sequence[str] | str = ("original", "auber"), n_boot: int = 10_000,
            n_boot_examples: int = 1000, seed: int = 0) -> list[GroupResult]:
    """Statistics of every (task, condition group) in ``data``; Holm within each group's comparisons.

    Each comparison dict holds ``target``, ``reference``, ``kind``, ``seeds``, ``all`` / ``clean``
    (:func:`benchmark.stats.compare` in percent points), ``n_excluded``, ``two_level`` {all, clean} and the
    Holm-adjusted exact p-values ``p_holm`` {all, clean}.
    """
    df = data.frame
    results: list[GroupResult] = []
    if df.empty:
        return results
    for task in sorted(df.task.unique(), key=_task_key):
        tdf = df[df.task == task]
        for group in GROUPS:
            if group == PRUNE_ONLY:
                gdf = tdf[tdf.condition == PRUNE_ONLY]
            else:
                gdf = tdf[tdf.condition.isin([RECOVER, CONTROL]) | (tdf.method == ORIGINAL) & (tdf.condition == PRUNE_ONLY)]
                if not tdf.condition.isin([RECOVER, CONTROL]).any():
                    continue
            if gdf.empty:
                continue
            units = sorted(gdf.unit.unique(), key=lambda u: u.sort_key)
            metric = gdf.metric.iloc[0]
            ustats = {u: _unit_stats(gdf[gdf.unit == u].sort_values("seed")) for u in units}
            comparisons = []
            for target, ref, kind in _comparison_pairs(units, group, against):
                comp = _compare_units(data, gdf, target, ref, metric, n_boot, n_boot_examples, seed)
                comp["kind"] = kind
                comparisons.append(comp)
            for which in ("all", "clean"):
                adjusted, _ = stats.holm([c[which]["p_exact"] for c in comparisons])
                for c, p in zip(comparisons, adjusted):
                    c.setdefault("p_holm", {})[which] = float(p)
            results.append(GroupResult(task=task, group=group, metric=metric,
                                       heads_total=float(pd.to_numeric(gdf.heads_total).max()),
                                       majority=100 * float(gdf.majority.median()),
                                       seeds=sorted(int(s) for s in gdf.seed.unique()), units=units,
                                       unit_stats=ustats, comparisons=comparisons))
    return results


# --------------------------------------------------------------------------- formatting helpers


def _num(v: float, digits: int = 2, sign: bool = False) -> str:
    if v is None or not np.isfinite(v):
        return "—"
    text = f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"
    if float(text) == 0:  # no "-0.00"
        text = f"{0:+.{digits}f}" if sign else f"{0:.{digits}f}"
    return text.replace("-", "−")


def _pm(mean: float, sd: float) -> str:
    if not np.isfinite(mean):
        return "—"
    return _num(mean) + ("" if not np.isfinite(sd) else f" ± {_num(sd)}")


def _p(p: float) -> str:
    if p is None or not np.isfinite(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3g}"


def _p_or_undefined(p: float, notes: str, undefined: str) -> str:
    """A secondary test's p, or "undefined" where :mod:`benchmark.stats` said the test is undefined (differences
    constant, or all zero, up to floating-point rounding)."""
    return "undefined" if not np.isfinite(p) and undefined in str(notes) else _p(p)


def _diff_ci(c: dict[str, Any], which: str) -> str:
    s = c[which]
    if s["n"] == 0:
        return "—"
    text = _num(s["mean_diff"], sign=True)
    if np.isfinite(s["ci_low"]):
        text += f" [{_num(s['ci_low'])}, {_num(s['ci_high'])}]"
    return text


def _marker(kind: str) -> str:
    return MARKERS.get(kind, "*")


def _md(df: pd.DataFrame) -> str:
    if df.empty:
        return "(none)\n"
    return df.to_markdown(index=False, disable_numparse=True) + "\n"


_TEX_REPL = [("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"), ("_", r"\_"),
             ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\textasciicircum{}")]
_TEX_SYMBOLS = [("±", r"$\pm$"), ("−", "$-$"), ("†", r"\textsuperscript{\dag}"), ("‡", r"\textsuperscript{\ddag}"),
                ("§", r"\textsuperscript{\S}"), ("Δ", r"$\Delta$"), ("—", "---"), ("×", r"$\times$"),
                ("≥", r"$\geq$"), ("≤", r"$\leq$"), ("<", r"$<$"), (">", r"$>$")]


def _tex(text: Any) -> str:
    """Escape a cell for LaTeX and turn the report's Unicode symbols into LaTeX."""
    s = str(text).replace("\\", "\x00")
    for a, b in _TEX_REPL[1:]:
        s = s.replace(a, b)
    s = s.replace("\x00", r"\textbackslash{}")
    for a, b in _TEX_SYMBOLS:
        s = s.replace(a, b)
    return re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", s)


def _latex(df: pd.DataFrame, caption: str, label: str) -> str:
    if df.empty:
        return ""
    body = df.map(_tex) if hasattr(df, "map") else df.applymap(_tex)
    body.columns = [_tex(c) for c in df.columns]
    align = "l" + "l" * (df.shape[1] - 1)
    tabular = body.to_latex(index=False, escape=False, column_format=align)
    return ("\\begin{table}[t]\n\\centering\n\\small\n" + tabular + f"\\caption{{{_tex(caption)}}}\n"
            f"\\label{{{label}}}\n\\end{{table}}\n")


# --------------------------------------------------------------------------- tables


def _group_title(r: GroupResult) -> str:
    suffix = "" if r.group == PRUNE_ONLY else " — prune + recover (with the fine-tuning control)"
    return f"{_task_label(r.task)} ({METRIC_LABEL.get(r.metric, r.metric)}){suffix}"


def task_table(r: GroupResult, which: str = "all") -> pd.DataFrame:
    """The Table-2 layout of one (task, group) as text cells. ``which``: "all" seeds or "clean" seeds only."""
    metric = METRIC_LABEL.get(r.metric, r.metric)
    refs = r.references  # the --against names that had a reference row here (original, auber, control, ...)
    rows = []
    for u in r.units:
        s = r.unit_stats[u]
        n, mean, sd = (s["n"], s["mean"], s["sd"]) if which == "all" else (s["n_clean"], s["mean_clean"], s["sd_clean"])
        row = {"method": u.name + (" +recover" if u.condition == RECOVER else "") + (f" opts={u.opts}" if u.opts else ""),
               "budget": u.budget if u.budget != "none" else "—", "n": str(n),
               f"{metric} mean ± SD": _pm(mean, sd),
               "heads pruned": heads_cell(s, r.heads_total)}
        for kind in refs:
            comp = next((c for c in r.comparisons if c["target"] == u and c["kind"] == kind), None)
            head = f"Δ vs {kind} [95% CI]"
            if comp is None:
                row[head], row[f"p vs {kind} (Holm)"] = "—", "—"
                continue
            p = comp["p_holm"][which]
            mark = _marker(kind) if np.isfinite(p) and p < ALPHA else ""
            row[head] = _diff_ci(comp, which) + mark
            row[f"p vs {kind} (Holm)"] = _p(p)
        if which == "all":
            row["degenerate"] = str(s["degenerate"]) + (f" ({s['base_failed']} base failed)" if s["base_failed"] else "")
        else:
            row["excluded"] = str(s["n"] - s["n_clean"])
        rows.append(row)
    return pd.DataFrame(rows)


def _table_notes(r: GroupResult, which: str = "all") -> list[str]:
    n_seeds = len(r.seeds)
    m = sum(1 for c in r.comparisons if np.isfinite(c[which]["p_exact"]))
    ns = sorted({c[which]["n"] for c in r.comparisons}) or [n_seeds]
    n_max = max(ns)
    notes = [f"majority-class baseline: {_num(r.majority)}; seeds: {', '.join(map(str, r.seeds))} (n = {n_seeds})."]
    if r.task in EXCLUDED_FROM_AVERAGE:
        notes.append(f"{_task_label(r.task)}'s dev set is adversarial: read every score beside the majority baseline "
                     f"({_num(r.majority)}); {_task_label(r.task)} is left out of cross-task averages.")
    if n_max == 0:
        notes.append("No seed is left for a comparison here." if which == "clean" else "No paired seeds.")
        return notes
    pmin = stats.min_exact_p(n_max)
    hmin = stats.min_holm_p(n_max, m) if m else math.nan
    line = (f"p: exact two-sided sign-flip test over paired seeds, Holm-adjusted over the {m} comparison(s) of this "
            f"table. With n = {n_max} paired seeds the smallest exact p is {_p(pmin)}")
    if m:
        line += f" and the smallest Holm-adjusted p is {_p(hmin)}"
    line += "."
    if (np.isfinite(hmin) and hmin >= ALPHA) or pmin >= ALPHA:
        line += f" **No comparison here can reach p < {ALPHA:g} with these seeds**; run more seeds (paper preset: 10)."
    notes.append(line)
    kinds = [k for k in r.references]
    if kinds:
        notes.append("Markers (Holm p < .05): " + ", ".join(f"{_marker(k)} vs {k}" for k in kinds) +
                     ". Δ in percent points (MCC × 100), 95% percentile bootstrap CI over seeds.")
    return notes


def comparisons_frame(results: list[GroupResult]) -> pd.DataFrame:
    """Every comparison in long form (numbers in percent points), one row per (comparison, seed set)."""
    rows = []
    for r in results:
        for c in r.comparisons:
            for which in ("all", "clean"):
                s, two = c[which], c["two_level"][which]
                rows.append({
                    "task": r.task, "group": r.group, "method": c["target"].name, "budget": c["target"].budget,
                    "condition": c["target"].condition, "opts": c["target"].opts or "", "vs": c["reference"].label,
                    "kind": c["kind"], "seeds": "all" if which == "all" else "without degenerate",
                    "n": s["n"], "n_excluded": c["n_excluded"] if which == "clean" else 0,
                    "mean_a": s["mean_a"], "mean_b": s["mean_b"], "mean_diff": s["mean_diff"], "sd_diff": s["sd_diff"],
                    "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                    "ci2_low": two["low"], "ci2_high": two["high"],
                    "p_exact": s["p_exact"], "p_holm": c["p_holm"][which],
                    "significant": bool(np.isfinite(c["p_holm"][which]) and c["p_holm"][which] < ALPHA),
                    "p_min": s["p_min"], "p_wilcoxon": s["p_wilcoxon"], "wilcoxon_stat": s["wilcoxon_stat"],
                    "t_stat": s["t_stat"], "p_t": s["p_t"],
                    "notes": "; ".join(x for x in (s["notes"], two.get("note", "")) if x),
                })
    return pd.DataFrame(rows)


def _comparisons_md(cf: pd.DataFrame) -> pd.DataFrame:
    if cf.empty:
        return cf
    cf = cf[(cf.seeds == "all") | (cf.n_excluded > 0)]
    return pd.DataFrame({
        "task": cf.task, "method": cf.method + np.where(cf.condition == RECOVER, " +recover", ""),
        "budget": cf.budget, "vs": cf.vs, "seeds": cf.seeds, "n": cf.n.astype(str),
        "Δ": [_num(v, sign=True) for v in cf.mean_diff], "SD Δ": [_num(v) for v in cf.sd_diff],
        "95% CI (seeds)": [f"[{_num(a)}, {_num(b)}]" if np.isfinite(a) else "—" for a, b in zip(cf.ci_low, cf.ci_high)],
        "95% CI (seeds+examples)": [f"[{_num(a)}, {_num(b)}]" if np.isfinite(a) else "—"
                                    for a, b in zip(cf.ci2_low, cf.ci2_high)],
        "p exact": [_p(v) for v in cf.p_exact], "p Holm": [_p(v) for v in cf.p_holm],
        "p Wilcoxon": [_p_or_undefined(v, n, "Wilcoxon undefined") for v, n in zip(cf.p_wilcoxon, cf.notes)],
        "p t-test": [_p_or_undefined(v, n, "t-test undefined") for v, n in zip(cf.p_t, cf.notes)],
        "notes": cf.notes,
    })


def scores_frame(results: list[GroupResult]) -> pd.DataFrame:
    """One numeric row per (task, group, unit): percent points, counts, heads pruned."""
    rows = []
    for r in results:
        for u in r.units:
            s = r.unit_stats[u]
            rows.append({"task": r.task, "group": r.group, "metric": r.metric, "method": u.name, "budget": u.budget,
                         "condition": u.condition, "opts": u.opts or "", "n": s["n"], "mean": s["mean"], "sd": s["sd"],
                         "ci_low_t": s["ci_low"], "ci_high_t": s["ci_high"], "n_clean": s["n_clean"],
                         "mean_clean": s["mean_clean"], "sd_clean": s["sd_clean"], "heads_pruned": s["heads_pruned"],
                         "heads_total": r.heads_total, "target": s["target"], "off_budget": s["off_budget"],
                         "degenerate": s["degenerate"], "base_failed": s["base_failed"],
                         "majority": r.majority})
    return pd.DataFrame(rows)


def base_failed_seeds(results: list[GroupResult]) -> dict[str, list[int]]:
    """Per task, the seeds whose unpruned base model failed (is degenerate), from every unit's records."""
    out: dict[str, set[int]] = {}
    for r in results:
        failed = out.setdefault(r.task, set())
        for s in r.unit_stats.values():
            failed.update(s.get("base_failed_seeds", ()))
    return {t: sorted(v) for t, v in out.items()}


def _mean_without(scores: dict[int, float], drop: Sequence[int]) -> float:
    kept = [v for seed, v in scores.items() if seed not in drop]
    return float(np.mean(kept)) if kept else math.nan


def _diff_without(a: dict[int, float], b: dict[int, float], drop: Sequence[int]) -> float:
    paired = [a[seed] - b[seed] for seed in a if seed in b and seed not in drop]
    return float(np.mean(paired)) if paired else math.nan


def summary_frames(results: list[GroupResult]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Cross-task summary per unit: (numeric frame, text frame).

    Every number leaves out the base-failed (task, seed) pairs (the unpruned base model of that seed is
    degenerate, so pruning it says nothing; protocol.md §6), as the per-task tables' clean view does: a task's
    column is the mean over its other seeds, the same seeds for every row, and a task whose every seed failed
    has no number and leaves the averages (:func:`summary_notes` says which). Averages are over the tasks not in
    :data:`EXCLUDED_FROM_AVERAGE` (WNLI) where the unit has a number; WNLI is shown beside its majority baseline.
    """
    tasks = sorted({r.task for r in results}, key=_task_key)
    failed = base_failed_seeds(results)
    avg_tasks = [t for t in tasks if t not in EXCLUDED_FROM_AVERAGE
                 and any(seed not in failed.get(t, ()) for r in results if r.task == t for seed in r.seeds)]
    side = [t for t in tasks if t in EXCLUDED_FROM_AVERAGE]
    units: list[Unit] = []
    for r in results:
        for u in r.units:
            if u not in units:
                units.append(u)
    units.sort(key=lambda u: u.sort_key)
    num_rows, txt_rows = [], []
    for u in units:
        num: dict[str, Any] = {"method": u.name, "budget": u.budget, "condition": u.condition, "opts": u.opts or ""}
        txt: dict[str, Any] = {"method": u.label.replace(f" [{u.budget}]", "") if u.budget != "none" else u.label,
                               "budget": u.budget if u.budget != "none" else "—"}
        means, diffs = [], []
        for t in tasks:
            rs = [r for r in results if r.task == t and u in r.unit_stats]
            r = next((x for x in rs if x.group == u.group()), rs[0] if rs else None)
            drop = failed.get(t, [])
            mean = _mean_without(r.unit_stats[u]["scores"], drop) if r else math.nan
            comp = next((c for c in r.comparisons if c["target"] == u and c["kind"] == ORIGINAL), None) if r else None
            diff = (_diff_without(r.unit_stats[u]["scores"], r.unit_stats[comp["reference"]]["scores"], drop)
                    if comp else math.nan)
            num[f"{t}"] = mean
            num[f"{t}_diff_vs_original"] = diff
            txt[f"{_task_label(t)}"] = _num(mean) if r is None or np.isfinite(mean) else "— (base failed)"
            if t in avg_tasks and np.isfinite(mean):
                means.append(mean)
                if np.isfinite(diff):
                    diffs.append(diff)
            if t in side:
                num[f"{t}_majority"] = r.majority if r else math.nan
                txt[f"{_task_label(t)} majority"] = _num(r.majority) if r else "—"
        num["tasks"] = len(means)
        num["mean_excl_wnli"] = float(np.mean(means)) if means else math.nan
        num["diff_vs_original_excl_wnli"] = float(np.mean(diffs)) if diffs else math.nan
        txt["tasks"] = f"{len(means)}/{len(avg_tasks)}"
        # a mean over a subset of the tasks is not comparable with the full rows' means (CoLA's MCC and MRPC's
        # accuracy live on different scales): the text table shows averages only for rows that ran on every task
        complete = len(means) == len(avg_tasks) > 0
        txt["mean (no WNLI)"] = _num(num["mean_excl_wnli"]) if complete else "—"
        txt["Δ vs original (no WNLI)"] = (_num(num["diff_vs_original_excl_wnli"], sign=True)
                                          if diffs and complete and len(diffs) == len(means) else "—")
        num_rows.append(num)
        txt_rows.append(txt)
    txt = pd.DataFrame(txt_rows)
    if not txt.empty:  # averages right after the per-task columns, WNLI last
        first = ["method", "budget"] + [_task_label(t) for t in tasks if t not in side] + [
            "tasks", "mean (no WNLI)", "Δ vs original (no WNLI)"]
        txt = txt[[c for c in first if c in txt.columns] + [c for c in txt.columns if c not in first]]
    return pd.DataFrame(num_rows), txt


def summary_notes(results: list[GroupResult]) -> list[str]:
    """What the cross-task summary leaves out: the base-failed seeds per task, and the tasks with no seed left."""
    failed = base_failed_seeds(results)
    notes = []
    for t in sorted(failed, key=_task_key):
        if not failed[t]:
            continue
        seeds = sorted({seed for r in results if r.task == t for seed in r.seeds})
        gone = all(seed in failed[t] for seed in seeds)
        notes.append(f"{_task_label(t)}: base model failed on {len(failed[t])} of {len(seeds)} seed(s) "
                     f"({', '.join(map(str, failed[t]))}), left out of every number of this table"
                     + ("; no seed is left, so the task is not averaged" if gone and t not in EXCLUDED_FROM_AVERAGE
                        else ""))
    return notes


def option_sets(data: RunData) -> pd.DataFrame:
    """The methods that ran with several option sets: one row per (method, options hash) with its record count
    and the options whose values differ between that method's sets (``name=value``, from ``method_options``).

    Columns: method, opts, records, differs. Empty when every method ran with one option set.
    """
    columns = ["method", "opts", "records", "differs"]
    sets: dict[str, dict[str, dict[str, Any]]] = {}
    counts: dict[tuple[str, str], int] = {}
    for r in data.records:
        method, opts = r["method"], _opts_of(r)
        sets.setdefault(method, {}).setdefault(opts, r.get("method_options") or {})
        counts[(method, opts)] = counts.get((method, opts), 0) + 1
    rows = []
    for method in sorted(sets, key=_method_rank):
        by_hash = sets[method]
        if len(by_hash) < 2:
            continue
        keys = sorted({k for o in by_hash.values() for k in o})
        differing = [k for k in keys if len({json.dumps(o.get(k), sort_keys=True) for o in by_hash.values()}) > 1]
        for opts, options in sorted(by_hash.items()):
            rows.append({"method": method, "opts": opts, "records": counts[(method, opts)],
                         "differs": ", ".join(f"{k}={json.dumps(options.get(k))}" for k in differing) or "—"})
    return pd.DataFrame(rows, columns=columns)


def wall_per_seed(data: RunData) -> pd.DataFrame:
    """Wall seconds of every cell, one row per (method, budget, condition) unit and one column per ``task/seed``
    (e.g. ``mrpc/s0``); NaN where the cell is missing. Rows in the report's method order; columns by task, seed."""
    df = data.frame
    if df.empty:
        return pd.DataFrame()
    df = df.assign(column=[f"{t}/s{int(s)}" for t, s in zip(df.task, df.seed)],
                   row=[u.label for u in df.unit],
                   wall=pd.to_numeric(df.wall_s, errors="coerce"))
    table = df.pivot_table(index="row", columns="column", values="wall", aggfunc="first", sort=False)
    rows = sorted(dict.fromkeys(zip(df.row, df.unit)), key=lambda ru: ru[1].sort_key)
    columns = sorted(table.columns, key=lambda c: (_task_key(c.split("/")[0]), int(c.split("/s")[1])))
    return table.reindex(index=[r for r, _ in rows], columns=columns)


def cost_frames(data: RunData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (task, unit): wall seconds per cell (mean, SD), pruning seconds, forward/backward examples (means)."""
    df = data.frame
    if df.empty:
        return pd.DataFrame(), pd.DataFrame()
    rows = []
    for (task, unit), g in df.groupby(["task", "unit"], sort=False):
        wall = pd.to_numeric(g.wall_s, errors="coerce").to_numpy(float)
        rows.append({"task": task, "method": unit.name, "budget": unit.budget, "condition": unit.condition,
                     "opts": unit.opts or "", "n": len(g), "wall_s_mean": np.nanmean(wall) if len(wall) else math.nan,
                     "wall_s_sd": np.nanstd(wall, ddof=1) if len(wall) > 1 else math.nan,
                     "prune_wall_s_mean": pd.to_numeric(g.prune_wall_s, errors="coerce").mean(),
                     "forward_examples_mean": pd.to_numeric(g.forward_examples, errors="coerce").mean(),
                     "backward_examples_mean": pd.to_numeric(g.backward_examples, errors="coerce").mean(),
                     "device": ",".join(sorted({str(d) for d in g.device if d})), "_key": (_task_key(task), unit.sort_key)})
    num = pd.DataFrame(rows).sort_values("_key").drop(columns="_key").reset_index(drop=True)
    txt = pd.DataFrame({
        "task": num.task, "method": num.method + np.where(num.condition == RECOVER, " +recover", ""),
        "budget": num.budget.where(num.budget != "none", "—"), "n": num.n.astype(str),
        "wall s / cell": [_pm(m, s) for m, s in zip(num.wall_s_mean, num.wall_s_sd)],
        "pruning s": [_num(v) for v in num.prune_wall_s_mean],
        "forward examples": [f"{v:,.0f}" if np.isfinite(v) else "—" for v in num.forward_examples_mean],
        "backward examples": [f"{v:,.0f}" if np.isfinite(v) else "—" for v in num.backward_examples_mean],
        "device": num.device})
    return num, txt


OTHER_OPTIONS = "ran with other options"


def _cell_fields(key: str) -> tuple[str, int, str, str, str] | None:
    """``task|seed=N|method|budget|condition|opts=H`` -> (task, N, method, budget, condition); None if malformed."""
    parts = key.split("|")
    if len(parts) < 5 or not parts[1].startswith("seed="):
        return None
    try:
        return parts[0], int(parts[1][5:]), parts[2], parts[3], parts[4]
    except ValueError:
        return None


def missing_frame(data: RunData) -> pd.DataFrame:
    """Cells a ``bench run`` planned (``runs.jsonl``) that have no record, and failed cells (``failures.jsonl``).

    A folder without ``runs.jsonl`` (made by an older runner) falls back to the grid tasks x seeds x units seen
    in it. Columns: task, seed, method, budget, condition, status ("missing", "failed", or "ran with other
    options": the cell has a record, but under another options hash than the planned one), error.
    """
    if data.planned:
        return _missing_from_plans(data)
    return _missing_from_grid(data)


def _missing_from_plans(data: RunData) -> pd.DataFrame:
    present = {r["cell"] for r in data.records}
    # a planned cell whose (task, seed, method, budget, condition) has a record under another options hash was
    # planned by a command run with other method options (e.g. before a preset's sizing changed)
    present_fields = {_cell_fields(str(r.get("cell", ""))) for r in data.records}
    failed = {f.get("cell"): f for f in data.failures}
    rows, seen = [], set()
    for folder, keys in data.planned.items():
        for key in keys:
            fields = _cell_fields(key)
            if key in present or key in seen or fields is None:
                continue
            seen.add(key)
            f = failed.get(key)
            status = "failed" if f else OTHER_OPTIONS if fields in present_fields else "missing"
            rows.append(dict(zip(("task", "seed", "method", "budget", "condition"), fields),
                             status=status, error=(f or {}).get("error", "")))
    for key, f in failed.items():
        if key not in seen and key not in present:
            fields = _cell_fields(str(key)) or (f.get("task"), f.get("seed"), f.get("method"), "?", f.get("condition", "?"))
            rows.append(dict(zip(("task", "seed", "method", "budget", "condition"), fields), status="failed",
                             error=f.get("error", "")))
    return pd.DataFrame(rows, columns=["task", "seed", "method", "budget", "condition", "status", "error"])


def _missing_from_grid(data: RunData) -> pd.DataFrame:
    df = data.frame
    rows = []
    failed = {}
    for f in data.failures:
        parts = str(f.get("cell", "")).split("|")
        budget = parts[3] if len(parts) > 4 else "?"
        failed[(f.get("task"), f.get("seed"), f.get("method"), budget, f.get("condition", "?"))] = f
    matched: set = set()
    if not df.empty:
        seeds = sorted(df.seed.unique())
        units = sorted(df.unit.unique(), key=lambda u: u.sort_key)
        present = set(zip(df.task, df.seed, df.unit))
        for task in sorted(df.task.unique(), key=_task_key):
            for seed in seeds:
                for u in units:
                    if (task, seed, u) in present:
                        continue
                    key = (task, int(seed), u.method, u.budget, u.condition)
                    f = failed.get(key)
                    if f is None:  # failures from an older runner without the budget in the key
                        f = next((v for k, v in failed.items() if k[:3] == key[:3] and k[4] == u.condition), None)
                    if f is not None:
                        matched.add(id(f))
                    rows.append({"task": task, "seed": int(seed), "method": u.name, "budget": u.budget,
                                 "condition": u.condition, "status": "failed" if f else "missing",
                                 "error": (f or {}).get("error", "")})
    for key, f in failed.items():
        if id(f) not in matched:
            rows.append({"task": key[0], "seed": key[1], "method": key[2], "budget": key[3], "condition": key[4],
                         "status": "failed", "error": f.get("error", "")})
    return pd.DataFrame(rows, columns=["task", "seed", "method", "budget", "condition", "status", "error"])


# --------------------------------------------------------------------------- plots


def _palette(data: RunData) -> dict[str, str]:
    names = sorted({u.name for u in data.frame.unit}, key=_method_rank) if not data.frame.empty else []
    return {n: method_color(n, names) for n in names}


def _markers(data: RunData) -> dict[str, str]:
    names = sorted({u.name for u in data.frame.unit}, key=_method_rank) if not data.frame.empty else []
    return {n: MARKER_CYCLE[i % len(MARKER_CYCLE)] for i, n in enumerate(names)}


_RC = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
       "legend.fontsize": 7, "axes.spines.top": False, "axes.spines.right": False, "pdf.fonttype": 42}


def _save(fig, folder: Path, name: str) -> list[Path]:
    out = []
    for ext in ("png", "pdf"):
        path = folder / f"{name}.{ext}"
        # no creation date in the PDF: the same records give byte-identical plots (a rerun of the report diffs clean)
        fig.savefig(path, dpi=200 if ext == "png" else None, metadata={"CreationDate": None} if ext == "pdf" else None)
        out.append(path)
    return out


def _new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _suffix(group: str) -> str:
    return "" if group == PRUNE_ONLY else "_recover"


def _tick(u: Unit, sep: str = "\n") -> str:
    parts = [u.name]  # the condition is in the figure's title
    if short_budget(u.budget):
        parts.append(short_budget(u.budget))
    if u.opts:
        parts.append(u.opts[:6])
    return sep.join(parts)


def plot_scores(r: GroupResult, folder: Path, colors: dict[str, str]) -> list[Path]:
    """Each unit's mean score as a point with its 95% t CI and the seeds as small dots; original / control /
    majority as lines. Points rather than bars: the y-axis is zoomed to the scores, and a bar on a zoomed axis
    would draw its length (the score) out of proportion."""
    bars = [u for u in r.units if u.name not in (ORIGINAL, CONTROL_NAME)]
    if not bars:
        return []
    fig = _new_figure(min(7.0, max(3.3, 1.2 + 0.42 * len(bars))), 2.5)
    ax = fig.add_subplot()
    x = np.arange(len(bars))
    values = []
    for i, u in enumerate(bars):
        s = r.unit_stats[u]
        err = None
        if np.isfinite(s["ci_low"]):
            err = [[s["mean"] - s["ci_low"]], [s["ci_high"] - s["mean"]]]
            values += [s["ci_low"], s["ci_high"]]
        color = colors.get(u.name, "#888888")
        ax.errorbar(i, s["mean"], yerr=err, fmt="o", markersize=6, color=color, markeredgecolor="black",
                    markeredgewidth=0.5, ecolor=color, elinewidth=1.2, capsize=3, zorder=3)
        pts = np.array(list(s["scores"].values()))
        jitter = np.linspace(-0.12, 0.12, len(pts)) if len(pts) > 1 else np.zeros(1)
        ax.scatter(i + 0.25 + jitter, pts, s=7, color="white", edgecolor="black", linewidth=0.5, zorder=3)
        values += [s["mean"], *pts]
    lines = [(ORIGINAL, "original", "--"), (CONTROL_NAME, "control", "-.")]
    for name, label, style in lines:
        u = next((v for v in r.units if v.name == name), None)
        if u is not None and np.isfinite(r.unit_stats[u]["mean"]):
            ax.axhline(r.unit_stats[u]["mean"], color=colors.get(name, "black"), linestyle=style, linewidth=1,
                       label=f"{label} ({_num(r.unit_stats[u]['mean'])})", zorder=2.5)
            values.append(r.unit_stats[u]["mean"])
    if np.isfinite(r.majority):
        ax.axhline(r.majority, color="#555555", linestyle=":", linewidth=1.2, label=f"majority ({_num(r.majority)})",
                   zorder=2.5)
        values.append(r.majority)
    finite = [v for v in values if np.isfinite(v)]
    if finite:
        lo, hi = min(finite), max(finite)
        pad = max(1.0, 0.12 * (hi - lo))
        ax.set_ylim(min(lo - pad, 0) if lo - pad < 0 < hi else lo - pad, hi + pad)
    if len(bars) > 6:  # long rows: one-line labels, slanted
        ax.set_xticks(x, [_tick(u, " ") for u in bars], rotation=35, ha="right", rotation_mode="anchor")
    else:
        ax.set_xticks(x, [_tick(u) for u in bars])
    ax.set_ylabel(METRIC_AXIS.get(r.metric, r.metric))
    n = len(r.seeds)
    fig.suptitle(f"{_task_label(r.task)}{'' if r.group == PRUNE_ONLY else ' (prune + recover)'}: mean ± 95% CI, "
                 f"n = {n} seed{'s' if n != 1 else ''}", fontsize=9)
    fig.legend(loc="outside lower center", frameon=False, ncol=3)
    ax.grid(axis="y", linewidth=0.3, alpha=0.6, zorder=0)
    ax.set_xlim(-0.6, len(bars) - 0.4)
    return _save(fig, folder, f"scores_{r.task}{_suffix(r.group)}")


def _has_sweep(r: GroupResult) -> bool:
    counts: dict[tuple[str, str, str], int] = {}
    for u in r.units:
        if u.name not in (ORIGINAL, CONTROL_NAME):
            key = (u.name, u.condition, u.opts or "")
            counts[key] = counts.get(key, 0) + 1
    return any(v >= 2 for v in counts.values())


def plot_sweep(r: GroupResult, folder: Path, colors: dict[str, str], markers: dict[str, str]) -> list[Path]:
    """Score vs heads pruned, one line per method over its budgets, 95% t CI bands; only if a method has >= 2 budgets."""
    if not _has_sweep(r):
        return []
    fig = _new_figure(5.0, 2.6)
    ax = fig.add_subplot()
    lines: dict[tuple[str, str, str], list[Unit]] = {}
    for u in r.units:
        if u.name not in (ORIGINAL, CONTROL_NAME):  # one line per option set too: never join two configurations
            lines.setdefault((u.name, u.condition, u.opts or ""), []).append(u)
    sets_of: dict[str, list[str]] = {}
    for name, _cond, opts in lines:
        sets_of.setdefault(name, [])
        if opts not in sets_of[name]:
            sets_of[name].append(opts)
    for (name, cond, opts), us in lines.items():
        second_set = sorted(sets_of[name]).index(opts) > 0  # drawn dotted with hollow markers
        st = sorted((r.unit_stats[u] for u in us), key=lambda s: s["heads_pruned"])
        x = np.array([s["heads_pruned"] for s in st])
        y = np.array([s["mean"] for s in st])
        lo = np.array([s["ci_low"] for s in st])
        hi = np.array([s["ci_high"] for s in st])
        col = colors.get(name, "#888888")
        label = name + (f" opts={opts[:6]}" if opts else "") + (" +recover" if cond == RECOVER else "")
        if len(st) == 1:  # one budget: a point with its CI
            err = None if not np.isfinite(lo[0]) else [[y[0] - lo[0]], [hi[0] - y[0]]]
            ax.errorbar(x, y, yerr=err, fmt=markers.get(name, "o"), markersize=3.5, color=col, elinewidth=0.8,
                        capsize=2, label=label, markerfacecolor="white" if second_set else col)
            continue
        ax.plot(x, y, marker=markers.get(name, "o"), markersize=3.5, color=col, linewidth=1.2,
                linestyle=":" if second_set else "-" if cond != RECOVER else "--", label=label,
                markerfacecolor="white" if second_set else col)
        if np.isfinite(lo).any():
            ax.fill_between(x, lo, hi, color=col, alpha=0.18, linewidth=0)
    for name, style in ((ORIGINAL, "--"), (CONTROL_NAME, "-.")):
        ref = next((u for u in r.units if u.name == name), None)
        if ref is not None:
            ax.axhline(r.unit_stats[ref]["mean"], color=colors.get(name, "black"), linestyle=style, linewidth=1,
                       label=name)
    if np.isfinite(r.majority):
        ax.axhline(r.majority, color="#555555", linestyle=":", linewidth=1.2, label="majority")
    total = int(r.heads_total) if np.isfinite(r.heads_total) else None
    ax.set_xlabel("heads pruned" + (f" (of {total})" if total else ""))
    ax.set_ylabel(METRIC_AXIS.get(r.metric, r.metric))
    fig.suptitle(f"{_task_label(r.task)}{'' if r.group == PRUNE_ONLY else ' (prune + recover)'}: score vs heads pruned "
                 f"(mean, 95% CI, n = {len(r.seeds)})", fontsize=9)
    fig.legend(loc="outside right center", frameon=False)
    ax.grid(linewidth=0.3, alpha=0.6)
    return _save(fig, folder, f"sweep_{r.task}{_suffix(r.group)}")


def plot_masks(data: RunData, task: str, folder: Path) -> list[Path]:
    """Heatmaps (layers x heads) of the fraction of seeds in which each head is pruned, one panel per unit."""
    df = data.frame[(data.frame.task == task) & (data.frame.method != ORIGINAL)]
    panels: dict[tuple, tuple[Unit, np.ndarray, int]] = {}
    for unit in sorted(df.unit.unique(), key=lambda u: (u.condition != PRUNE_ONLY, u.sort_key)):
        key = (unit.name, unit.budget, unit.opts)
        if key in panels:  # the mask is held fixed under recovery: show each (method, budget) once
            continue
        masks = [data.records[i].get("mask") for i in df[df.unit == unit].rec]
        masks = [np.asarray(m, dtype=float) for m in masks if m is not None]
        if not masks or len({m.shape for m in masks}) != 1:
            continue
        pruned = 1.0 - np.mean(masks, axis=0)  # mask: 1 = kept, 0 = pruned
        panels[key] = (unit, pruned, len(masks))
    if not panels:
        return []
    n = len(panels)
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    layers, heads = next(iter(panels.values()))[1].shape
    panel_w = 1.6
    fig = _new_figure(min(7.0, 0.6 + panel_w * ncols), 0.5 + nrows * max(1.3, panel_w * layers / max(heads, 1)))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    image = None
    for ax, (unit, pruned, count) in zip(axes.flat, panels.values()):
        image = ax.imshow(pruned, vmin=0, vmax=1, cmap="cividis", aspect="auto", interpolation="nearest")
        title = unit.name + (f" {short_budget(unit.budget)}" if short_budget(unit.budget) else "")
        ax.set_title(f"{title}\n{pruned.sum():.1f} heads, n = {count}", fontsize=7)
        ax.set_xticks(range(0, heads, 2 if heads > 8 else 1))
        ax.set_yticks(range(0, layers, 2 if layers > 8 else 1))
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("head")
    for ax in axes[:, 0]:
        ax.set_ylabel("layer")
    fig.colorbar(image, ax=axes, shrink=0.8, label="fraction of seeds pruned")
    fig.suptitle(f"{_task_label(task)}: pruned heads", fontsize=9)
    return _save(fig, folder, f"masks_{task}")


def plot_auber_layers(data: RunData, task: str, folder: Path) -> list[Path]:
    """AUBER's per-layer reward per episode (mean over seeds), from ``trace["layers"][i]["rewards"]``."""
    df = data.frame[data.frame.task == task]
    panels = []
    for unit in sorted(df.unit.unique(), key=lambda u: u.sort_key):
        curves: dict[int, list[np.ndarray]] = {}
        for i in df[df.unit == unit].rec:
            layers = (data.records[i].get("trace") or {}).get("layers")
            if not isinstance(layers, list):
                continue
            for j, entry in enumerate(layers):
                if isinstance(entry, dict) and entry.get("rewards"):
                    curves.setdefault(int(entry.get("layer", j)), []).append(np.asarray(entry["rewards"], float))
        if curves:
            panels.append((unit, curves))
    if not panels:
        return []
    import matplotlib
    from matplotlib import colors as mcolors

    n = len(panels)
    ncols = min(3, n)
    nrows = math.ceil(n / ncols)
    fig = _new_figure(min(7.0, 0.9 + 2.3 * ncols), 0.4 + 2.0 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    all_layers = sorted({layer for _, c in panels for layer in c})
    norm = mcolors.BoundaryNorm(np.arange(min(all_layers) - 0.5, max(all_layers) + 1.5), 256)
    cmap = matplotlib.colormaps["viridis"]
    for ax, (unit, curves) in zip(axes.flat, panels):
        for layer, runs in sorted(curves.items()):
            length = max(len(x) for x in runs)
            stack = np.full((len(runs), length), np.nan)
            for k, x in enumerate(runs):
                stack[k, :len(x)] = x
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(stack, axis=0)
            ax.plot(np.arange(1, length + 1), mean, color=cmap(norm(layer)), linewidth=1)
        ax.set_title(f"{unit.label} (n = {max(len(v) for v in curves.values())})", fontsize=7)
        ax.set_xlabel("episode")
        ax.set_ylabel("reward")
        ax.grid(linewidth=0.3, alpha=0.6)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    from matplotlib.cm import ScalarMappable

    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, label="layer", shrink=0.8,
                 ticks=all_layers if len(all_layers) <= 12 else None)
    fig.suptitle(f"{_task_label(task)}: AUBER reward per episode, per layer (mean over seeds)", fontsize=9)
    return _save(fig, folder, f"auber_layers_{task}")


def plot_cost(results: list[GroupResult], folder: Path, colors: dict[str, str], markers: dict[str, str]) -> list[Path]:
    """Cost vs score: mean wall seconds per cell (log x) against the mean score over seeds, one panel per task;
    open markers for prune+recover units."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    tasks = sorted({r.task for r in results}, key=_task_key)
    if not tasks:
        return []
    ncols = min(4, len(tasks))
    nrows = math.ceil(len(tasks) / ncols)
    fig = _new_figure(min(7.0, 0.8 + 1.9 * ncols), 0.6 + 1.9 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    handles: dict[str, Any] = {}
    recover = False
    for ax, task in zip(axes.flat, tasks):
        for r in (x for x in results if x.task == task):
            for u in r.units:
                if r.group == RECOVER and u.condition == PRUNE_ONLY:
                    continue  # drawn in the prune-only panel already
                s = r.unit_stats[u]
                if not (np.isfinite(s["wall_s"]) and s["wall_s"] > 0):
                    continue
                col = colors.get(u.name, "#888888")
                h = ax.plot(s["wall_s"], s["mean"], linestyle="none", marker=markers.get(u.name, "o"), markersize=4,
                            color=col, mfc=col if u.condition != RECOVER else "white")[0]
                if u.condition != RECOVER:
                    handles.setdefault(u.name, h)
                else:
                    recover = True
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
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    if recover:
        from matplotlib.lines import Line2D

        handles["open marker: +recover"] = Line2D([], [], linestyle="none", marker="o", color="black", mfc="white")
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="outside lower center",
                   ncol=min(6, len(handles)), frameon=False)
    return _save(fig, folder, "cost_vs_score")


def make_plots(data: RunData, results: list[GroupResult], folder: Path) -> list[Path]:
    """Every plot, PNG and PDF, into ``folder``; a failing plot is warned about and skipped."""
    import matplotlib

    folder.mkdir(parents=True, exist_ok=True)
    colors, markers = _palette(data), _markers(data)
    jobs = []
    for r in results:
        jobs.append((f"scores {r.task} {r.group}", lambda r=r: plot_scores(r, folder, colors)))
        jobs.append((f"sweep {r.task} {r.group}", lambda r=r: plot_sweep(r, folder, colors, markers)))
    for task in sorted({r.task for r in results}, key=_task_key):
        jobs.append((f"masks {task}", lambda t=task: plot_masks(data, t, folder)))
        jobs.append((f"auber layers {task}", lambda t=task: plot_auber_layers(data, t, folder)))
    jobs.append(("cost vs score", lambda: plot_cost(results, folder, colors, markers)))
    written: list[Path] = []
    with matplotlib.rc_context(_RC):
        for name, job in jobs:
            try:
                written += job()
            except Exception as exc:  # noqa: BLE001 - one bad plot must not lose the report
                _warn(f"plot {name} failed: {type(exc).__name__}: {exc}")
    return written


# --------------------------------------------------------------------------- the report


def _parse_list(value: str | Sequence[str] | None, default: Sequence[str]) -> tuple[str, ...]:
    if value is None:
        return tuple(default)
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(x.strip().lower() for x in items if x and x.strip())


def build_report(folders: Sequence[str | Path] | str | Path, against: Sequence[str] | str = ("original", "auber"),
                 formats: Sequence[str] | str = ("md", "csv", "tex"), plots: bool = True,
                 out: str | Path | None = None, echo: bool = True, n_boot: int = 10_000,
                 n_boot_examples: int = 1000, seed: int = 0) -> Path:
    """Build the report of one or more run folders; returns the report folder.

    Args:
        folders: run folder(s) holding ``records.jsonl`` (combined; duplicate cells kept once, warned).
        against: reference method names (``original``, ``auber``, any method) or ``"all"`` (every pair).
        formats: any of ``md``, ``csv``, ``tex`` (list or comma-separated string).
        plots: write PNG and PDF plots to ``REPORT_DIR/plots``.
        out: report folder (default ``<first folder>/report``).
        echo: print the Markdown report.
        n_boot, n_boot_examples, seed: bootstrap replicates (seed level; two-level) and their RNG seed.

    Raises:
        FileNotFoundError: a run folder does not exist.
        ValueError: an unknown format.
    """
    if isinstance(folders, (str, Path)):
        folders = [folders]
    folders = [Path(f) for f in folders]
    if not folders:
        raise ValueError("no run folder given")
    fmts = _parse_list(formats, ("md", "csv", "tex"))
    bad = sorted(set(fmts) - {"md", "csv", "tex"})
    if bad:
        raise ValueError(f"unknown format(s) {', '.join(bad)}; known: md, csv, tex")
    ag = _parse_list(against, ("original", "auber"))
    against_arg: Sequence[str] | str = "all" if "all" in ag else ag
    out_dir = Path(out) if out is not None else folders[0] / "report"
    out_dir.mkdir(parents=True, exist_ok=True)

    data = load_runs(folders)
    results = analyse(data, against=against_arg, n_boot=n_boot, n_boot_examples=n_boot_examples, seed=seed)
    cf = comparisons_frame(results)
    sf = scores_frame(results)
    summ_num, summ_txt = summary_frames(results)
    cost_num, cost_txt = cost_frames(data)
    walls = wall_per_seed(data)
    missing = missing_frame(data)
    plot_paths = make_plots(data, results, out_dir / "plots") if plots and results else []

    md = [f"# Head-pruning benchmark report\n",
          f"Run folder(s): {', '.join(f'`{f}`' for f in folders)}. Records: {len(data.records)}"
          + (f" ({len(data.duplicates)} duplicate cell(s) ignored)" if data.duplicates else "")
          + (f"; {len(data.broken)} unreadable line(s) skipped (listed below)" if data.broken else "") + ".  ",
          "Scores: the task's primary metric on the GLUE dev split in percent points (MCC × 100 for CoLA), "
          "mean ± sample SD over n seeds. Comparisons are paired by seed (same base model); Δ = row − reference.\n"]
    if data.broken:
        md.append(f"**Unreadable lines, skipped.** A record's cell among them is listed as missing; the next "
                  f"`bench run` into the folder moves each line to `{REJECTED}` (kept there, not deleted) and "
                  f"computes the missing cells again:\n")
        md += [f"- `{b.path}` line {b.line}: {b.reason}" for b in data.broken] + [""]
    ns = sorted({len(r.seeds) for r in results})
    if ns:
        md.append("**What these seeds can show.** " + "; ".join(
            f"n = {n} seed{'s' if n != 1 else ''}: smallest exact two-sided p = {_p(stats.min_exact_p(n))}"
            for n in ns) +
            ". Exact paired tests cannot give p < 2/2^n (5 seeds never reach p < .05; protocol.md §5).\n")
    else:
        md.append("**No finished cells yet.**\n")
    tex_parts = ["% bench report tables; needs \\usepackage{booktabs}. Wide tables: wrap the tabular in "
                 "\\resizebox{\\textwidth}{!}{...} (graphicx) or use table*.\n"]
    for r in results:
        title = _group_title(r)
        table = task_table(r, "all")
        md += [f"## {title}\n", _md(table)]
        md += [f"- {n}" for n in _table_notes(r, "all")] + [""]
        tex_parts.append(_latex(table, f"{title}. Mean ± SD over seeds; " + " ".join(_table_notes(r, 'all')[1:]),
                                f"tab:{r.task}{_suffix(r.group).replace('_', '-')}"))
        if any(c["n_excluded"] for c in r.comparisons) or any(s["n"] != s["n_clean"] for s in r.unit_stats.values()):
            clean = task_table(r, "clean")
            md += [f"**{_task_label(r.task)} without degenerate / base-failed seeds** (a seed leaves a comparison when "
                   "either side is degenerate or its base model failed; protocol.md §6):\n", _md(clean)]
            md += [f"- {n}" for n in _table_notes(r, "clean") if n.startswith(("p:", "No "))] + [""]
            tex_parts.append(_latex(clean, f"{title}, without degenerate or base-failed seeds.",
                                    f"tab:{r.task}{_suffix(r.group).replace('_', '-')}-clean"))
    sets = option_sets(data)
    if not sets.empty:
        md += ["## Option sets\n", "Some methods ran with more than one option set; each of their rows above and "
               "below carries `opts=HASH` (the first 12 hex digits of the options' hash, as in the records' cell "
               "keys). Rows of different option sets are different configurations, not seeds of one:\n",
               _md(sets), ""]
    if results:
        md += ["## Cross-task summary (WNLI left out of the averages)\n", _md(summ_txt),
               "- mean: average over the non-WNLI tasks of each row's mean score, shown only for rows that ran on all "
               "of them (tasks: how many it ran on; summary.csv has the partial averages too); Δ: the "
               "average of its mean paired differences vs original. Base-failed (task, seed) pairs are left out of "
               "every number here (as in the tables' clean view), the same seeds for every row. WNLI's dev set is "
               "adversarial: compare it with its majority baseline."]
        md += [f"- {n}." for n in summary_notes(results)] + [""]
        tex_parts.append(_latex(summ_txt, "Cross-task summary; WNLI beside its majority baseline and left out of the "
                                          "averages.", "tab:summary"))
        md += ["## All comparisons (secondary tests and the two-level bootstrap)\n", _md(_comparisons_md(cf)),
               "- CI (seeds): percentile bootstrap over seeds. CI (seeds+examples): two-level paired bootstrap "
               "(seeds, then dev examples, same examples for both methods). p exact: sign-flip test; p Holm: within "
               "the task table; Wilcoxon signed-rank and paired t-test are secondary.\n"]
        md += ["## Cost\n", _md(cost_txt), "- Wall seconds per cell: pruning, any re-fine-tuning and the dev "
               "evaluation (the seed's shared base-model fine-tuning is not counted); pruning s: the method alone; "
               "examples passed forward / backward, the dev evaluation included.\n"]
        tex_parts.append(_latex(cost_txt, "Cost per cell.", "tab:cost"))
        walls_txt = walls.map(lambda v: "—" if not np.isfinite(v) else f"{v:.1f}" if v < 10 else f"{v:,.0f}"
                              ).reset_index(names="method")
        md += ["## Wall seconds per (task, seed)\n", _md(walls_txt),
               "- One cell each (same definition as above); — where the cell is missing. CSV: `wall_per_seed.csv`.\n"]
    md.append("## Missing and failed cells\n")
    if missing.empty:
        md.append("None: every cell " + ("planned by the folder's `bench run` commands" if data.planned
                                         else "of the grid tasks × seeds × methods seen") + " is present.\n")
    else:
        n_failed = int((missing.status == "failed").sum())
        n_other = int((missing.status == OTHER_OPTIONS).sum())
        basis = ("the cells the folder's `bench run` commands planned (`runs.jsonl`)" if data.planned
                 else "the grid tasks × seeds × methods seen")
        md.append(f"{len(missing) - n_failed - n_other} missing and {n_failed} failed cell(s) relative to {basis} "
                  f"(failures: `failures.jsonl`; rerun the command to compute them)"
                  + (f"; {n_other} planned cell(s) have a record only under another option set of their method "
                     f"(status \"{OTHER_OPTIONS}\": planned by a command run with other method options)"
                     if n_other else "") + ":\n")
        md.append(_md(missing.head(60)) + (f"\n({len(missing) - 60} more in missing.csv)\n" if len(missing) > 60 else ""))
    if plot_paths:
        md.append("## Plots\n")
        for p in plot_paths:
            if p.suffix == ".png":
                md.append(f"![{p.stem}](plots/{p.name})")
        md.append("")
    text = "\n".join(md) + "\n"

    if "md" in fmts:
        (out_dir / "report.md").write_text(text, encoding="utf-8")
    if "csv" in fmts:
        sf.to_csv(out_dir / "scores.csv", index=False)
        cf.to_csv(out_dir / "comparisons.csv", index=False)
        summ_num.to_csv(out_dir / "summary.csv", index=False)
        cost_num.to_csv(out_dir / "cost.csv", index=False)
        walls.to_csv(out_dir / "wall_per_seed.csv", index_label="method")
        missing.to_csv(out_dir / "missing.csv", index=False)
        if not sets.empty:
            sets.to_csv(out_dir / "option_sets.csv", index=False)
    if "tex" in fmts:
        (out_dir / "tables.tex").write_text("\n".join(p for p in tex_parts if p), encoding="utf-8")
    if echo:
        click.echo(text)
        click.echo(f"report written to {out_dir}")
    return out_dir


@click.command("report")
@click.argument("folders", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--against", default="original,auber", show_default=True,
              help="Reference methods to compare every row with (comma-separated), or 'all' for every pair.")
@click.option("--format", "formats", default="md,csv,tex", show_default=True, help="Any of md, csv, tex.")
@click.option("--plots/--no-plots", default=True, show_default=True, help="PNG and PDF plots in REPORT_DIR/plots.")
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="Report folder. Default: FIRST_DIR/report.")
def report_cmd(folders, against, formats, plots, out) -> None:
    """Significance tests, tables and plots of one or more run folders (combined)."""
    try:
        build_report(list(folders), against=against, formats=formats, plots=plots, out=out)
    except (OSError, ValueError) as exc:  # a missing folder, or a report folder that cannot be written
        raise click.ClickException(str(exc)) from exc
