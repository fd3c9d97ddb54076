"""Provenance in the report: which code, libraries, machines and precision produced the records behind each
declared Holm family, and which records came from a checkout with uncommitted changes.

* :func:`record_frame`: one row per record (its commit, ``git_dirty``, ``git_diff``, ``base_check``, library
  versions, device, machine, threads, precision), old schemas read as :class:`Record` derives them.
* Membership: :func:`family_members` (the records a declared family's tests use: both rows of each tested comparison
  in the family, on its paired seeds; for an area family, every level of both curves and their reference) and
  :func:`level_members` (every record of a budget level of a (task, condition group), the group's unpruned
  references counted at each of its levels). Both are frames of ``rec`` (the record's position in
  ``RunData.records``) and key columns; a record may belong to several groups.
* :func:`provenance_frame`: per group of members (``by``, any columns of the membership frame or of
  :func:`record_frame`), the commits, the dirty records (named), the versions, devices, machines, precision and base
  checks, with their counts.
* :class:`ProvenanceReport`: the report's "Provenance" section and ``provenance.csv`` / ``provenance_records.csv``.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from headprune_bench.benchmark.provenance import UNKNOWN
from headprune_bench.benchmark.report.analysis import GroupResult, base_failed_seeds, holm_level
from headprune_bench.benchmark.report.curves import CurveFrames, display_name, panel_of
from headprune_bench.benchmark.report.load import RunData
from headprune_bench.benchmark.report.units import budget_key, condition_group, task_key
from headprune_bench.benchmark.store.records import (
    NO_BUDGET,
    NOT_RECORDED,
    ORIGINAL,
    PRUNE_ONLY,
    RECOVER,
    SCORE_PASS,
    Record,
)

LIBRARIES = ("torch", "transformers", "datasets", "numpy", "scikit-learn", "python", "headprune-bench")
"""The library versions a record names (``provenance.versions``), in report order."""
FIELDS = (*LIBRARIES, "device", "machine", "threads", "precision")
"""What :func:`provenance_frame` counts per group beside commits and dirty records, and checks for a mix."""
LEVEL_KEY = ("task", "group", "level")
"""The grouping of :func:`level_members`: a budget level of a (task, condition group)."""
DIRTY_LISTED = 100
"""At most this many dirty records are listed in ``report.md`` (all of them in ``provenance_records.csv``)."""


def _commit_of(git_commit: Any) -> str:
    """A record's commit without ``+dirty`` (``unknown``, or :data:`NOT_RECORDED` without one)."""
    text = str(git_commit or NOT_RECORDED)
    return text[: -len("+dirty")] if text.endswith("+dirty") else text


def precision_by_config(folders: Iterable[Path]) -> dict[str, str]:
    """The precision of each experiment (``config_hash``) of ``folders``' ``run.json``: its ``extra.precision``, or
    ``fp32`` (only a non-default precision enters the experiment). Folders without a readable run.json are left out."""
    out: dict[str, str] = {}
    for folder in folders:
        try:
            run = json.loads((Path(folder) / "run.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(run, dict) and run.get("config_hash"):
            extra = (run.get("experiment") or {}).get("extra") or {}
            out[str(run["config_hash"])] = str(extra.get("precision", "fp32"))
    return out


def _record_row(i: int, r: Record, precisions: dict[str, str]) -> dict[str, Any]:
    prov = r.provenance
    versions = prov.get("versions") or {}
    precision = prov.get("precision") or precisions.get(str(prov.get("config_hash")), NOT_RECORDED)
    return {"rec": i, "cell": r.cell, "task": r.task, "seed": int(r.seed), "method": r.method,
            "budget": r.budget.spec, "condition": r.condition,
            "group": condition_group(r.condition),
            "commit": _commit_of(prov.get("git_commit")), "git_commit": str(prov.get("git_commit") or NOT_RECORDED),
            "git_dirty": r.git_dirty, "git_diff": r.git_diff, "base_check": r.base_check,
            **{lib: str(versions.get(lib, NOT_RECORDED)) for lib in LIBRARIES},
            "device": r.cost.device or NOT_RECORDED, "machine": r.cost.machine or NOT_RECORDED,
            "threads": str(r.cost.threads) if r.cost.threads else NOT_RECORDED, "precision": precision,
            "config_hash": str(prov.get("config_hash") or NOT_RECORDED), "started_at": r.started_at,
            "schema": int(r.schema), "mask_from": _score_pass_cell(r)}


def _score_pass_cell(r: Record) -> str:
    """The cell whose scores a record's mask was derived from (``trace.score_pass``), or ``""``."""
    source = r.trace.get(SCORE_PASS)
    return str(source.get("cell", "")) if isinstance(source, dict) else ""


RECORD_COLUMNS = ["rec", "cell", "task", "seed", "method", "budget", "condition", "group", "commit", "git_commit",
                  "git_dirty", "git_diff", "base_check", *LIBRARIES, "device", "machine", "threads", "precision",
                  "config_hash", "started_at", "schema", "mask_from"]
"""Columns of :func:`record_frame`."""


def record_frame(data: RunData) -> pd.DataFrame:
    """One row per record of ``data`` (``rec``: its position in ``data.records``): :data:`RECORD_COLUMNS`.
    ``group`` is the condition group of the record's own table (the original's prune-only record also stands in the
    prune+recover table, as :func:`level_members` counts it); ``commit`` the commit without ``+dirty``; ``git_dirty``
    True/False, ``unknown`` or ``not recorded``; ``precision`` the record's, else its experiment's ``run.json``;
    ``mask_from`` the cell whose scores its mask was derived from (``trace.score_pass``: a sweep's other level)."""
    precisions = precision_by_config(data.folders)
    rows = [_record_row(i, r, precisions) for i, r in enumerate(data.records)]
    return pd.DataFrame(rows, columns=RECORD_COLUMNS)


# --------------------------------------------------------------------------- which records each group holds


def level_members(data: RunData) -> pd.DataFrame:
    """``(task, group, level, rec)``: the records of each budget level of each (task, condition group), the levels
    being the budgets of the group's pruned records (a sweep's ``fraction:0.3``, ``matched:auber``, ``own``). The
    unpruned references of a group (the original's prune-only record in both groups, the control in prune+recover)
    are counted at every level of it: every test of a level draws on them."""
    rows: list[tuple[str, str, str, int]] = []
    for i, r in enumerate(data.records):
        group = condition_group(r.condition)
        rows.append((r.task, group, r.budget.spec, i))
    df = pd.DataFrame(rows, columns=["task", "group", "level", "rec"])
    is_ref = df.level == NO_BUDGET
    originals = {i for i, r in enumerate(data.records) if r.method == ORIGINAL and r.condition == PRUNE_ONLY}
    out = [df[~is_ref]]
    for (task, group), g in df[~is_ref].groupby(["task", "group"], sort=False):
        refs = df[is_ref & (df.task == task) & ((df.group == group) | df.rec.isin(originals))]
        for level in g.level.unique():
            out.append(refs.assign(group=group, level=level))
    lone = df[is_ref & ~df.task.isin(df[~is_ref].task)]  # a task with references only: its own "none" level
    members = pd.concat([*out, lone], ignore_index=True).drop_duplicates()
    return _sorted(members)


def _sorted(members: pd.DataFrame) -> pd.DataFrame:
    rank = {RECOVER: 0, PRUNE_ONLY: 1}
    order = members.assign(_t=members.task.map(task_key), _g=members.group.map(lambda g: rank.get(g, 2)),
                           _l=members.level.map(budget_key))
    return order.sort_values(["_t", "_g", "_l", "rec"]).drop(columns=["_t", "_g", "_l"]).reset_index(drop=True)


def _family_of(task: str, group: str, c: Any) -> tuple[str, str]:
    """(family id, level) of a comparison: its declared ``family`` (``task/group/level/kind``), or where none is set
    (a comparison made outside :func:`analysis.analyse`) ``task/group/level/vs`` or ``/pairwise``."""
    level = c.level or holm_level(c)
    return c.family or f"{task}/{group}/{level}/{'pairwise' if c.kind == 'pair' else 'vs'}", level


def family_members(data: RunData, results: Sequence[GroupResult], auc: pd.DataFrame | None = None) -> pd.DataFrame:
    """``(family, task, group, level, rec)``: the records each declared Holm family's tests use. A comparison family
    (``results``): the two rows of each tested comparison in the family, on its paired seeds (base-failed seeds are
    in none); comparisons outside every family (a null control's, a superseded row's) and untested ones (head counts
    differ) add nothing. An area family (``auc``'s pairs, :data:`benchmark.report.curves.AUC_COLUMNS`, level
    ``area``): every level of both curves of each tested pair and the condition's unpruned reference, on the task's
    seeds whose base model did not fail."""
    frame = data.frame
    index = {(t, int(s), u): int(i) for t, s, u, i in zip(frame.task, frame.seed, frame.unit, frame.rec)}
    rows = []
    for r in results:
        for c in (*r.comparisons, *r.pairwise):
            if not (c.tested and c.in_family):
                continue
            family, level = _family_of(r.task, r.group, c)
            for seed in c.seeds:
                for unit in (c.target, c.reference):
                    rec = index.get((r.task, int(seed), unit))
                    if rec is not None:
                        rows.append((family, r.task, r.group, level, rec))
    columns = ["family", "task", "group", "level", "rec"]
    members = pd.DataFrame(rows, columns=columns)
    if auc is not None and not auc.empty:
        members = pd.concat([members, _area_members(frame, auc)], ignore_index=True)
    return members.drop_duplicates().reset_index(drop=True)


def _area_members(frame: pd.DataFrame, auc: pd.DataFrame) -> pd.DataFrame:
    """:func:`family_members` of the tested area pairs of ``auc``."""
    pairs = auc[(auc.kind == "pair") & pd.to_numeric(auc.p_exact, errors="coerce").notna()]
    rows = []
    for (task, condition, family), g in pairs.groupby(["task", "condition", "family"], sort=False):
        conditions, reference = panel_of(condition)
        unpruned = (frame.method == ORIGINAL) & (frame.condition == PRUNE_ONLY)
        tdf = frame[(frame.task == task) & (frame.condition.isin(conditions) | unpruned)]
        tdf = tdf[~tdf.seed.isin(base_failed_seeds(frame[frame.task == task]))]
        names = set(g.method) | set(g.vs)
        levels = {lv for text in g.levels for lv in str(text).split(";")}
        keep = [u.name == reference or (u.condition in conditions and display_name(u) in names and u.budget in levels)
                for u in tdf.unit]
        rows += [(family, task, condition, "area", int(i)) for i in tdf.rec[keep]]
    return pd.DataFrame(rows, columns=["family", "task", "group", "level", "rec"])


# --------------------------------------------------------------------------- per group


def counts_text(values: Iterable[Any]) -> str:
    """``value (n); value (n)``, most frequent first (ties in order of first appearance); empty for none."""
    return "; ".join(f"{v} ({n})" for v, n in Counter(str(v) for v in values).most_common())


def _known(values: Iterable[Any]) -> set[str]:
    return {str(v) for v in values} - {NOT_RECORDED, UNKNOWN}


PROVENANCE_COLUMNS = ["records", "seeds", "commits", "commit_list", "dirty", "dirty_unknown", "dirty_cells",
                      "dirty_diffs", *FIELDS, "base_check", "mixed"]
"""Columns of :func:`provenance_frame` after its ``by`` columns."""


def _summarise(g: pd.DataFrame) -> dict[str, Any]:
    g = g.sort_values(["started_at", "rec"])
    dirty = g[g.git_dirty.map(lambda v: v is True)]
    commits = list(dict.fromkeys(g.commit))
    return {
        "records": len(g), "seeds": g.seed.nunique(), "commits": len(_known(commits)),
        "commit_list": "; ".join(f"{c} ({int((g.commit == c).sum())})" for c in commits),
        "dirty": len(dirty), "dirty_unknown": int(g.git_dirty.map(lambda v: not isinstance(v, bool)).sum()),
        "dirty_cells": "; ".join(dirty.cell), "dirty_diffs": counts_text(dirty.git_diff.map(str)),
        **{f: counts_text(g[f]) for f in FIELDS}, "base_check": counts_text(g.base_check),
        "mixed": ", ".join(f for f in FIELDS if len(_known(g[f])) > 1),
    }


def provenance_frame(data: RunData, by: Sequence[str] = LEVEL_KEY, members: pd.DataFrame | None = None,
                     records: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per group of records, where they came from: the ``by`` columns, then :data:`PROVENANCE_COLUMNS`.

    ``members``: which records each group holds (column ``rec`` and group columns; a record may be in several
    groups), default :func:`level_members`; a ``by`` column it lacks is the record's own (:func:`record_frame`,
    e.g. ``method``); with ``by`` all record columns and no ``members``, each record is counted once. Per group:
    ``records``, ``seeds``; ``commits`` (distinct commits, dirty or not) and ``commit_list`` (each with its count,
    in order of first use); ``dirty`` (records whose checkout had uncommitted changes), ``dirty_unknown`` (records
    that cannot say: git could not tell, or an old record without a commit), ``dirty_cells`` (the dirty records'
    cell keys) and ``dirty_diffs`` (their diff hashes, ``not recorded`` before schema 3); per :data:`FIELDS` and
    ``base_check`` each value with its count; ``mixed``: the fields with two or more known values in the group."""
    recs = record_frame(data) if records is None else records
    by = list(by)
    if members is None:
        members = recs[["rec", *by]] if set(by) <= set(recs.columns) else level_members(data)
    own = [c for c in by if c not in members.columns]
    missing = [c for c in own if c not in recs.columns]
    if missing:
        raise KeyError(f"provenance_frame: no column {', '.join(missing)} in the members or the records")
    joined = (members[["rec", *[c for c in by if c in members.columns]]]
              .merge(recs.drop(columns=[c for c in recs.columns if c in members.columns and c != "rec"]), on="rec")
              .drop_duplicates([*by, "rec"]))
    if joined.empty:
        return pd.DataFrame(columns=[*by, *PROVENANCE_COLUMNS])
    rows = [{**dict(zip(by, key if isinstance(key, tuple) else (key,))), **_summarise(g)}
            for key, g in joined.groupby(by, sort=False)]
    return pd.DataFrame(rows, columns=[*by, *PROVENANCE_COLUMNS])


# --------------------------------------------------------------------------- the report's section and CSVs

SECTION_TEXT = (
    "What produced the records behind the numbers above: the code's commit and whether its checkout had uncommitted "
    "changes (`git_dirty`, with a hash of the changes, `git_diff`, from schema 3; an older record only has its "
    "commit's `+dirty` suffix), the library versions, the device and CPU or GPU, the precision, and whether a resumed "
    "seed's base model, loaded or fine-tuned again, was checked against its stored original record (`base_check`: "
    "`equal`, `differs:N`, `not compared` when the seed's base model and original are the run's own, `not recorded` "
    "before schema 3; docs/output-files.md). The table: per budget level of each task and condition group, every "
    "record of the level and the group's unpruned references, on which every declared family of the level draws. "
    "`provenance.csv`: one row per declared Holm family (the records its tests use); `provenance_records.csv`: one "
    "row per record.\n")


def _code(cell: str) -> str:
    """A cell key as inline code in a Markdown table (its ``|`` escaped)."""
    return "`" + str(cell).replace("|", "\\|") + "`"


@dataclass
class ProvenanceReport:
    """The provenance of a report's records: ``records`` (:func:`record_frame`), ``levels`` (per
    :data:`LEVEL_KEY`, the table of ``report.md``) and ``families`` (per declared family, ``provenance.csv``; per
    level when the analysis declared none)."""

    records: pd.DataFrame
    levels: pd.DataFrame
    families: pd.DataFrame

    @classmethod
    def of(cls, data: RunData, results: Sequence[GroupResult], curves: CurveFrames | None = None) -> ProvenanceReport:
        """The provenance of ``data``'s records, per level and per declared family of ``results`` and of the area
        pairs of ``curves`` (a sweep's, or None)."""
        records = record_frame(data)
        levels = provenance_frame(data, LEVEL_KEY, level_members(data), records) if data.records else \
            pd.DataFrame(columns=[*LEVEL_KEY, *PROVENANCE_COLUMNS])
        members = family_members(data, results, curves.auc if curves is not None else None)
        families = (provenance_frame(data, ["family", *LEVEL_KEY], members, records) if not members.empty
                    else levels)
        return cls(records=records, levels=levels, families=families)

    def summary(self) -> list[str]:
        """Markdown lines over all records: commits, dirty records by commit, each field's values with counts
        (nothing without records; ``report.md`` and ``findings.md`` both show it)."""
        recs = self.records
        if recs.empty:
            return []
        dirty = recs[recs.git_dirty.map(lambda v: v is True)]
        cannot = int(recs.git_dirty.map(lambda v: not isinstance(v, bool)).sum())
        md = [f"**All {len(recs)} records**: {len(_known(recs.commit))} commit(s); {len(dirty)} from a checkout "
              "with uncommitted changes" + (f" (listed in report.md), on {counts_text(dirty.commit.str.slice(0, 12))}"
                                            if len(dirty) else "")
              + (f"; {cannot} that cannot say (git could not tell, or no commit recorded)" if cannot else "") + ".\n"]
        md += [f"- {f}: {counts_text(recs[f])}" for f in FIELDS]
        return md + [f"- base check: {counts_text(recs.base_check)}", ""]

    def section(self) -> list[str]:
        """The "Provenance" section of ``report.md`` (nothing without records)."""
        recs = self.records
        if recs.empty:
            return []
        from headprune_bench.benchmark.report.tables import md_table

        md = ["## Provenance\n", SECTION_TEXT, *self.summary()]
        varying = [f for f in FIELDS if len(_known(recs[f])) > 1]
        dirty = recs[recs.git_dirty.map(lambda v: v is True)]
        lv = self.levels
        if not lv.empty:
            table = pd.DataFrame({"task": lv.task, "group": lv.group, "level": lv.level,
                                  "records": lv.records.astype(str), "commits": lv.commits.astype(str),
                                  "dirty": lv.dirty.astype(str)})
            for f in varying:
                table[f] = lv[f]
            if recs.base_check.nunique() > 1:
                table["base check"] = lv.base_check
            table["mixed"] = lv.mixed.replace("", "—")
            shown = f"{', '.join(varying)}: the field(s) with two or more known values above" if varying else \
                "every other field has one known value"
            md += [f"Per level ({shown}; mixed: the fields with two or more known values in the level; commits: "
                   "distinct commits; dirty: records from a checkout with uncommitted changes):\n", md_table(table)]
        if len(dirty):
            shown = dirty.sort_values(["started_at", "rec"]).head(DIRTY_LISTED)
            derived = recs[recs.mask_from.isin(set(dirty.cell)) & ~recs.cell.isin(set(dirty.cell))]
            md += [f"**Records from a checkout with uncommitted changes** ({len(dirty)}"
                   + (f", the first {DIRTY_LISTED} listed; all in `provenance_records.csv`" if len(dirty) > DIRTY_LISTED
                      else "") + "): a number that uses one of them rests on code that no commit holds"
                   + (f"; {len(derived)} other record(s) derive their masks from one of these records' scores "
                      "(`trace.score_pass`; `mask_from` in `provenance_records.csv`)" if len(derived) else "")
                   + ".\n",
                   md_table(pd.DataFrame({"cell": shown.cell.map(_code), "commit": shown.commit.str.slice(0, 12),
                                          "diff": shown.git_diff.map(str), "started": shown.started_at}))]
        return md

    def write_csv(self, out_dir: Path) -> None:
        """``provenance.csv`` (:attr:`families`) and ``provenance_records.csv`` (:attr:`records`).

        Raises:
            OSError: a file cannot be written.
        """
        self.families.to_csv(Path(out_dir) / "provenance.csv", index=False)
        self.records.to_csv(Path(out_dir) / "provenance_records.csv", index=False)
