"""Per-cell views of the loaded runs, as numeric frames: missing and failed cells, option sets, cost per cell,
wall seconds per (task, seed)."""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from headprune_bench.benchmark.report.load import RunData, opts_of, parse_key, without_opts
from headprune_bench.benchmark.report.units import sorted_methods, sorted_units, task_key
from headprune_bench.benchmark.store.folder import BASE_DIR, base_train_infos
from headprune_bench.benchmark.store.records import CellKey

OTHER_OPTIONS = "ran with other options"
"""Status of a planned cell that has a record only under another options hash of its method."""
MISSING_COLUMNS = ["task", "seed", "method", "budget", "condition", "status", "error"]


def _missing_row(key: CellKey, status: str, error: str, method: str | None = None) -> dict[str, Any]:
    return {"task": key.task, "seed": key.seed, "method": method or key.method, "budget": key.budget,
            "condition": key.condition, "status": status, "error": error}


def missing_frame(data: RunData) -> pd.DataFrame:
    """Cells a ``bench run`` planned (``runs.jsonl``) that have no record, and failed cells (``failures.jsonl``).

    A folder without ``runs.jsonl`` falls back to the grid tasks x seeds x units seen in it. Columns
    :data:`MISSING_COLUMNS`; status "missing", "failed" or :data:`OTHER_OPTIONS`. A cell planned under an option
    set a later run replaced (``RunData.superseded``) is not listed.
    """
    rows = _missing_from_plans(data) if data.planned else _missing_from_grid(data)
    return pd.DataFrame(rows, columns=MISSING_COLUMNS)


def _failure_key(f: dict[str, Any]) -> CellKey:
    """A failure's cell key; for a failure without a readable one, its own fields with budget ``?``."""
    return parse_key(str(f.get("cell", ""))) or CellKey(f.get("task"), f.get("seed"), f.get("method"), "?",
                                                        f.get("condition", "?"))


def _missing_from_plans(data: RunData) -> list[dict[str, Any]]:
    present = {r.cell for r in data.records}
    # a planned cell with a record under another options hash only: planned with other method options
    present_cells = {without_opts(parse_key(r.cell)) for r in data.records}
    failed = {f.get("cell"): f for f in data.failures}
    rows, seen, replaced_somewhere = [], set(), set()
    for folder, keys in data.planned.items():
        replaced = data.superseded.get(folder, set())
        for text in keys:
            key = parse_key(text)
            if text in present or text in seen or key is None:
                continue
            if text in replaced:  # a later run into this folder planned the cell with other options: not to do
                replaced_somewhere.add(text)  # (another folder may still plan it as its current option set)
                continue
            seen.add(text)
            f = failed.get(text)
            status = "failed" if f else OTHER_OPTIONS if without_opts(key) in present_cells else "missing"
            rows.append(_missing_row(key, status, (f or {}).get("error", "")))
    for text, f in failed.items():
        if text not in seen and text not in present and text not in replaced_somewhere:
            rows.append(_missing_row(_failure_key(f), "failed", f.get("error", "")))
    return rows


def _missing_from_grid(data: RunData) -> list[dict[str, Any]]:
    df = data.frame
    failed = {without_opts(_failure_key(f)): f for f in data.failures}
    rows, matched = [], set()
    units = sorted_units(df.unit.unique()) if not df.empty else []
    present = set(zip(df.task, df.seed, df.unit))
    for task in sorted(df.task.unique(), key=task_key) if not df.empty else ():
        for seed in sorted(df.seed.unique()):
            for u in units:
                if (task, seed, u) in present:
                    continue
                key = CellKey(task, int(seed), u.method, u.budget, u.condition, None)
                f = failed.get(key)
                if f is None:  # failures from an older runner without the budget in the key
                    f = next((v for k, v in failed.items() if (k.task, k.seed, k.method, k.condition)
                              == (task, int(seed), u.method, u.condition)), None)
                if f is not None:
                    matched.add(id(f))
                rows.append(_missing_row(key, "failed" if f else "missing", (f or {}).get("error", ""), u.name))
    for key, f in failed.items():
        if id(f) not in matched:
            rows.append(_missing_row(key, "failed", f.get("error", "")))
    return rows


def option_sets(data: RunData) -> pd.DataFrame:
    """The methods that ran with several option sets: one row per (method, options hash) with its record count
    and the options whose values differ between that method's sets (``name=value``, from ``method_options``).

    Columns: method, opts, records, differs. Empty when every method ran with one option set.
    """
    sets: dict[str, dict[str, dict[str, Any]]] = {}
    counts: dict[tuple[str, str], int] = {}
    for r in data.records:
        opts = opts_of(r)
        sets.setdefault(r.method, {}).setdefault(opts, r.method_options)
        counts[(r.method, opts)] = counts.get((r.method, opts), 0) + 1
    rows = []
    for method in sorted_methods(list(sets)):
        by_hash = sets[method]
        if len(by_hash) < 2:
            continue
        keys = sorted({k for o in by_hash.values() for k in o})
        differing = [k for k in keys if len({json.dumps(o.get(k), sort_keys=True) for o in by_hash.values()}) > 1]
        for opts, options in sorted(by_hash.items()):
            rows.append({"method": method, "opts": opts, "records": counts[(method, opts)],
                         "differs": ", ".join(f"{k}={json.dumps(options.get(k))}" for k in differing) or "—"})
    return pd.DataFrame(rows, columns=["method", "opts", "records", "differs"])


BASE_ROW = "base fine-tune"
TOTAL_ROW = "total"


def wall_per_seed(data: RunData, missing: pd.DataFrame | None = None) -> pd.DataFrame:
    """Wall seconds of every cell, one row per unit (index: its label) and one column per ``task/seed`` (e.g.
    ``mrpc/s0``); NaN where the cell is missing. Rows in the report's order; columns by task, seed. Two rows
    follow, rounded to milliseconds: :data:`BASE_ROW`, the base fine-tune (:func:`base_walls`; left out when no
    column has one), and :data:`TOTAL_ROW`, the sum of the rows above but for ``RunData.superseded_records``; NaN
    for a (task, seed) with a cell missing, failed or of other options in ``missing`` (:func:`missing_frame`,
    computed when not given), or with no base time while other columns have one. See docs/choices.md
    ("Reports")."""
    df = data.frame
    if df.empty:
        return pd.DataFrame()
    df = df.assign(column=[f"{t}/s{int(s)}" for t, s in zip(df.task, df.seed)],
                   row=[u.label for u in df.unit],
                   wall=pd.to_numeric(df.wall_s, errors="coerce").astype(float))
    table = df.pivot_table(index="row", columns="column", values="wall", aggfunc="first", sort=False)
    order = {c: (task_key(t), int(s)) for c, t, s in zip(df.column, df.task, df.seed)}
    table = table.reindex(index=[u.label for u in sorted_units(df.unit)], columns=sorted(table.columns, key=order.get))
    base = base_walls(data)
    if any(c in base for c in table.columns):
        table.loc[BASE_ROW] = [round(base.get(c, math.nan), 3) for c in table.columns]
    missing = missing_frame(data) if missing is None else missing
    incomplete = {f"{t}/s{int(s)}" for t, s, status in zip(missing.task, missing.seed, missing.status)
                  if status in ("missing", "failed", OTHER_OPTIONS) and str(s).lstrip("-").isdigit()}
    current = df[[data.records[i].cell not in data.superseded_records for i in df.rec]]
    total = current.groupby("column")["wall"].sum(min_count=1).reindex(table.columns)
    if BASE_ROW in table.index:
        total = total.add(table.loc[BASE_ROW], fill_value=0.0)
        incomplete |= {c for c in table.columns if math.isnan(table.loc[BASE_ROW, c])}
    table.loc[TOTAL_ROW] = [math.nan if c in incomplete else round(total[c], 3) for c in table.columns]
    return table


def base_walls(data: RunData) -> dict[str, float]:
    """Wall seconds of each base fine-tune by ``task/seed`` column (``mrpc/s0``), from the ``train_info.json``
    files of the run folders' ``base/`` (:func:`benchmark.store.folder.base_train_infos`; the first folder's where
    several have one); a file without a number ``wall_s`` is left out."""
    walls: dict[str, float] = {}
    for folder in data.folders:
        for (task, seed), info in base_train_infos(folder / BASE_DIR).items():
            wall = info.get("wall_s")
            if isinstance(wall, (int, float)) and not isinstance(wall, bool):
                walls.setdefault(f"{task}/s{seed}", float(wall))
    return walls


UNKNOWN_MACHINE = "unknown"


def machine_counts(machines: Iterable[str]) -> str:
    """How many cells ran on each machine (the records' ``cost.machine``), most first, then by name:
    ``"AMD EPYC x12, unknown x3"``; :data:`UNKNOWN_MACHINE` counts the records that name no machine."""
    counts = Counter(m or UNKNOWN_MACHINE for m in machines)
    return ", ".join(f"{m} x{n}" for m, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def cost_frame(data: RunData) -> pd.DataFrame:
    """Per (task, unit), in report order: n cells, wall seconds per cell (mean, SD; NaN SD for one cell), pruning
    seconds and forward / backward examples (means), devices (comma-joined), machines (:func:`machine_counts`).
    Columns: task, method, budget, condition, opts, n, wall_s_mean, wall_s_sd, prune_wall_s_mean,
    forward_examples_mean, backward_examples_mean, device, machine."""
    df = data.frame
    if df.empty:
        return pd.DataFrame()
    rows = []
    for (task, unit), g in df.groupby(["task", "unit"], sort=False):
        wall = pd.to_numeric(g.wall_s, errors="coerce").to_numpy(float)
        rows.append({"task": task, "method": unit.name, "budget": unit.budget, "condition": unit.condition,
                     "opts": unit.opts or "", "n": len(g), "wall_s_mean": np.nanmean(wall) if len(wall) else math.nan,
                     "wall_s_sd": np.nanstd(wall, ddof=1) if len(wall) > 1 else math.nan,
                     "prune_wall_s_mean": pd.to_numeric(g.prune_wall_s, errors="coerce").mean(),
                     "forward_examples_mean": pd.to_numeric(g.forward_examples, errors="coerce").mean(),
                     "backward_examples_mean": pd.to_numeric(g.backward_examples, errors="coerce").mean(),
                     "device": ",".join(sorted({str(d) for d in g.device if d})), "machine": machine_counts(g.machine),
                     "_key": (task_key(task), unit.sort_key)})
    return pd.DataFrame(rows).sort_values("_key").drop(columns="_key").reset_index(drop=True)
