"""The records of one or more run folders as :class:`Record` objects and one tidy frame (one row per record), the
input of every table and plot of the report and of the end-of-run summary."""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from headprune_bench.benchmark.report.units import Unit
from headprune_bench.benchmark.store.jsonl import FAILURES, PLANS, RECORDS, REJECTED, BrokenLine, scan_jsonl
from headprune_bench.benchmark.store.records import BASE_DIFFERS, CONTROL, CONTROL_NAME, CellKey, Record

log = logging.getLogger("benchmark")

#: Columns of :attr:`RunData.frame`, in order.
FRAME_COLUMNS = ["task", "seed", "method", "budget", "condition", "opts", "unit", "score", "metric", "majority",
                 "degenerate", "base_failed", "heads_pruned", "heads_total", "target", "wall_s", "prune_wall_s",
                 "forward_examples", "backward_examples", "device", "machine", "weights", "layers_emptied",
                 "head_scales", "rec"]

#: What skipping an unreadable line of each file means for the report.
_BROKEN_CONSEQUENCE = {
    RECORDS: "If it was a record, its cell is listed as missing.",
    FAILURES: "If it was a failure, its cell is listed as missing, not failed.",
    PLANS: "If it was a `bench run` entry, the cells only it planned are not listed as missing.",
}


class ReportWarning(UserWarning):
    """Something a reader of the report should know about its input (duplicate cells, unreadable folders)."""


def warn(message: str) -> None:
    """Issue ``message`` as a :class:`ReportWarning`, and log it where the logger ``benchmark`` has a handler."""
    warnings.warn(message, ReportWarning, stacklevel=3)
    if log.hasHandlers():
        log.warning(message)


def parse_key(text: str) -> CellKey | None:
    """The :class:`~headprune_bench.benchmark.store.records.CellKey` of a cell key string; None when it is not one."""
    try:
        return CellKey.parse(text)
    except ValueError:
        return None


def without_opts(key: CellKey | None) -> CellKey | None:
    """The cell a key names, whatever options its method ran with."""
    return None if key is None else dataclasses.replace(key, opts=None)


@dataclass
class RunData:
    """Records of one or more run folders, de-duplicated by cell key.

    Attributes:
        folders: the run folders, in the order given.
        records: one :class:`benchmark.store.records.Record` per cell (the first folder's where several hold it).
        failures: the latest failure (``failures.jsonl`` entry, a dict) of each cell without a record.
        duplicates: cell keys seen again after their first record (ignored).
        frame: one row per record, columns :data:`FRAME_COLUMNS` (scores as fractions), the :class:`Unit` in
            column ``unit`` and the record's position in ``records`` in column ``rec``.
        planned: planned cell keys per folder (from ``runs.jsonl``; a folder made by an older runner has none).
        broken: unreadable lines of the folders' JSONL files (skipped, each named in a warning and in the report).
        superseded: per folder, the cell keys (of its records and plans) whose option set a later ``bench run``
            into that folder replaced (:func:`superseded_cells`).
        superseded_records: the keys of :attr:`records` superseded in the folder they were read from; such
            records stay in every table, under their own options hash, but not in a seed's wall-time total.
        presets: the ``--preset`` of every ``bench run`` in ``runs.jsonl`` (``quick`` where none was given).
    """

    folders: list[Path]
    records: list[Record]
    failures: list[dict[str, Any]]
    duplicates: list[str] = field(default_factory=list)
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    planned: dict[Path, list[str]] = field(default_factory=dict)
    broken: list[BrokenLine] = field(default_factory=list)
    superseded: dict[Path, set[str]] = field(default_factory=dict)
    superseded_records: set[str] = field(default_factory=set)
    presets: set[str] = field(default_factory=set)


def preset_of(argv: Sequence[str]) -> str:
    """The ``--preset`` of a ``bench run`` argv (``runs.jsonl``), ``quick`` (the default) when it names none."""
    for i, arg in enumerate(argv):
        if arg == "--preset" and i + 1 < len(argv):
            return str(argv[i + 1])
        if str(arg).startswith("--preset="):
            return str(arg).split("=", 1)[1]
    return "quick"


def _read_folder(folder: Path) -> tuple[list[dict], list[dict], list[dict], list[BrokenLine]]:
    """(records, failures, plans, unreadable lines) of one run folder, each unreadable line warned about."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such run folder")
    if not (folder / RECORDS).exists():
        if not (folder / "run.json").exists():
            raise FileNotFoundError(f"{folder}: not a run folder (no {RECORDS} and no run.json); give the --out "
                                    f"folder of a `bench run`")
        warn(f"{folder}: no {RECORDS} (nothing finished yet?)")
    recs, broken = scan_jsonl(folder / RECORDS)
    fails, broken_f = scan_jsonl(folder / FAILURES)
    plans, broken_p = scan_jsonl(folder / PLANS)
    for b in broken + broken_f + broken_p:
        warn(f"{b}: skipped. {_BROKEN_CONSEQUENCE[b.path.name]} The next `bench run` into {folder} moves "
             f"the line to {REJECTED} (kept there) and computes any missing cell again.")
    return recs, fails, plans, broken + broken_f + broken_p


def superseded_cells(plans: Sequence[dict[str, Any]], cells: Iterable[Any]) -> set[str]:
    """The keys among ``cells`` (a folder's record and planned cell keys) whose option set a later plan replaced.

    ``plans``: the folder's ``runs.jsonl`` entries, in the order written. A cell takes the options hash of the
    newest plan that lists it; a key under another hash of that cell is superseded, one that no plan lists is not."""
    current: dict[CellKey, str] = {}
    for plan in plans:
        for text in plan.get("cells", []):
            key = parse_key(str(text))
            if key is not None:
                current[without_opts(key)] = str(text)
    out = set()
    for text in cells:
        key = parse_key(str(text))
        if key is not None and current.get(without_opts(key), text) != text:
            out.add(str(text))
    return out


def _warn_duplicates(duplicates: list[str], differing: list[str]) -> None:
    if not duplicates:
        return
    shown = ", ".join(duplicates[:3]) + (" ..." if len(duplicates) > 3 else "")
    msg = f"{len(duplicates)} duplicate cell(s) across the folders kept once (first folder wins): {shown}"
    if differing:
        msg += f"; {len(differing)} of them with DIFFERENT scores (e.g. {differing[0]}): check the runs match"
    warn(msg)


def load_runs(folders: Sequence[str | Path]) -> RunData:
    """Read and combine the ``records.jsonl`` / ``failures.jsonl`` / ``runs.jsonl`` of ``folders``.

    Records are read through :meth:`Record.from_dict` (any schema). Each of these is skipped with a
    :class:`ReportWarning`: a cell key seen again (the first is kept), a folder without ``records.jsonl``, an
    unreadable line (:func:`scan_jsonl`; listed in ``RunData.broken``), a record ``from_dict`` refuses. Failures
    whose cell has a record are dropped.

    Raises:
        FileNotFoundError: a folder does not exist, or is not a run folder (neither records.jsonl nor run.json).
    """
    data = RunData(folders=[Path(f) for f in folders], records=[], failures=[])
    seen: dict[str, Record] = {}
    read_from: dict[str, Path] = {}  # record key -> the folder it was read from
    differing: list[str] = []
    failures: list[dict[str, Any]] = []
    for folder in data.folders:
        entries, fails, plans, broken = _read_folder(folder)
        data.broken += broken
        for entry in entries:
            try:
                rec = Record.from_dict(entry)
            except ValueError as exc:
                warn(f"{folder / RECORDS}: {exc}; skipped")
                continue
            if rec.cell in seen:
                data.duplicates.append(rec.cell)
                if seen[rec.cell].score != rec.score:
                    differing.append(rec.cell)
                continue
            seen[rec.cell] = rec
            read_from[rec.cell] = folder
            data.records.append(rec)
        failures.extend(fails)
        data.presets |= {preset_of(p.get("argv") or []) for p in plans}
        if plans:
            data.planned[folder] = list(dict.fromkeys(k for p in plans for k in p.get("cells", [])))
            data.superseded[folder] = superseded_cells(plans, [e.get("cell") for e in entries] + data.planned[folder])
            data.superseded_records |= {c for c in data.superseded[folder] if read_from.get(c) == folder}
    _warn_duplicates(data.duplicates, differing)
    _warn_mixed_experiments(data.records)
    _warn_other_base_models(data.records)
    latest: dict[str, dict[str, Any]] = {}
    for f in failures:
        if f.get("cell") not in seen:
            latest[f.get("cell", repr(f))] = f
    data.failures = list(latest.values())
    data.frame = records_frame(data.records)
    return data


def _warn_mixed_experiments(records: list[Record]) -> None:
    """Warn when the records come from run folders of different experiments (different config hashes)."""
    hashes = sorted({str(r.provenance.get("config_hash")) for r in records if r.provenance.get("config_hash")})
    if len(hashes) > 1:
        warn(f"the records come from {len(hashes)} different experiments (config hashes {', '.join(hashes)}: another "
             f"model, recipe, data cap or precision); rows of different experiments are compared as if they were one")


def _warn_other_base_models(records: list[Record]) -> None:
    """Warn about the records whose ``trace`` carries :data:`BASE_DIFFERS` (a base model that predicts the dev
    set otherwise than the stored ``original`` record of its (task, seed))."""
    flagged: dict[tuple[str, int], list[Record]] = {}
    for r in records:
        if r.trace.get(BASE_DIFFERS):
            flagged.setdefault((r.task, r.seed), []).append(r)
    for (task, seed), rows in sorted(flagged.items()):
        counts = sorted({int(r.trace[BASE_DIFFERS]) for r in rows})
        warn(f"{task} seed {seed}: {len(rows)} record(s) were computed on a base model that predicts "
             f"{'/'.join(map(str, counts))} dev example(s) otherwise than the seed's original record (a base model "
             f"fine-tuned again, or DIR/base/ replaced, between sittings); they are compared with that seed's other "
             f"records as if both started from one model")


# --------------------------------------------------------------------------- records -> frame


def opts_of(record: Record) -> str:
    """The options hash a record's cell key carries; for a key without one (first runner), the options' JSON
    (``-`` without options)."""
    key = parse_key(record.cell)
    if key is not None and key.opts is not None:
        return key.opts
    return json.dumps(record.method_options, sort_keys=True) if record.method_options else "-"


def _target_of(record: Record) -> float:
    """The head count a cell was asked to prune (NaN when it decided its own, or for the unpruned model)."""
    target = record.budget.target
    return float(target) if isinstance(target, (int, float)) and not isinstance(target, bool) else math.nan


def _row(i: int, r: Record) -> dict[str, Any]:
    metric = r.primary_metric
    return {"task": r.task, "seed": int(r.seed), "method": r.method, "budget": r.budget.spec,
            "condition": r.condition, "opts": opts_of(r), "score": float(r.score), "metric": metric,
            "majority": float(r.majority_baseline.get(metric, math.nan)), "degenerate": bool(r.degenerate),
            "base_failed": bool(r.base_failed), "heads_pruned": r.heads_pruned, "heads_total": r.heads_total,
            "target": _target_of(r), "wall_s": r.cost.wall_s, "prune_wall_s": r.cost.prune_wall_s,
            "forward_examples": r.cost.forward_examples, "backward_examples": r.cost.backward_examples,
            "device": r.cost.device, "machine": r.cost.machine, "weights": r.weights,
            "layers_emptied": r.layers_emptied, "head_scales": r.head_scales is not None, "rec": i}


def records_frame(records: Iterable[Record | dict[str, Any]]) -> pd.DataFrame:
    """The tidy frame of ``records`` (dicts are read through :meth:`Record.from_dict`): columns
    :data:`FRAME_COLUMNS`, one row per record, scores and majority baselines as fractions, ``rec`` the record's
    position in ``records``.

    The options hash is part of a row's :class:`Unit` wherever its method ran with several option sets (at any
    budget). A record repeating the (task, seed, unit) of an earlier one is dropped with a :class:`ReportWarning`.

    Raises:
        ValueError: a dict that is not a record (from :meth:`Record.from_dict`).
    """
    recs = [r if isinstance(r, Record) else Record.from_dict(r) for r in records]
    if not recs:
        return pd.DataFrame(columns=FRAME_COLUMNS)
    df = pd.DataFrame([_row(i, r) for i, r in enumerate(recs)])
    n_opts = df.groupby("method")["opts"].transform("nunique")
    df["unit"] = [Unit(CONTROL_NAME if c == CONTROL else m, m, b, c, o if k > 1 else None)
                  for m, b, c, o, k in zip(df.method, df.budget, df.condition, df.opts, n_opts)]
    dup = df.duplicated(["task", "seed", "unit"], keep="first")
    if dup.any():
        warn(f"{int(dup.sum())} record(s) repeat a (task, seed, unit) under another cell key; first kept")
        df = df[~dup]
    return df[FRAME_COLUMNS].reset_index(drop=True)
