"""The declared Holm families of a report (docs/protocol.md §5): one row per family with its members, size and the
smallest Holm p its seeds allow (``families.csv`` and the report's "Families" section)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headprune_bench.benchmark import stats
from headprune_bench.benchmark.report.analysis import ALPHA, PRIMARY, GroupResult
from headprune_bench.benchmark.report.tables import md_table

FAMILY_COLUMNS = ["family", "task", "group", "level", "kind", "role", "size", "n", "min_p_holm", "significant",
                  "outside", "members"]
"""``size``: tests in the family (Holm's m); ``n``: the most paired seeds of a member; ``min_p_holm``: the smallest
Holm p those seeds allow (``size * 2/2**n``); ``significant``: members with Holm p < :data:`ALPHA`; ``outside``:
comparisons of the same id left out of it (null controls, superseded rows) or not tested (head counts differ);
``members``: ``row − reference``, ``; ``-separated."""


def family_row(family: str, members: list[str], tested_n: list[int], p_holm: list[float], outside: int) -> dict:
    """One row of :data:`FAMILY_COLUMNS` of the family ``task/group/level/kind`` with its tested members."""
    task, group, level, kind = family.split("/", 3)
    n = max(tested_n, default=0)
    return {"family": family, "task": task, "group": group, "level": level, "kind": kind,
            "role": "primary" if kind == PRIMARY else "secondary", "size": len(tested_n), "n": n,
            "min_p_holm": stats.min_holm_p(n, len(tested_n)) if tested_n and n else math.nan,
            "significant": int(sum(1 for p in p_holm if np.isfinite(p) and p < ALPHA)), "outside": outside,
            "members": "; ".join(members)}


def families_frame(results: list[GroupResult], auc: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every declared family of ``results`` (comparisons, over all seeds) and of the area pairs ``auc``
    (:data:`benchmark.report.curves.AUC_COLUMNS`), in report order (:data:`FAMILY_COLUMNS`)."""
    rows = []
    for r in results:
        comps = [*r.comparisons, *r.pairwise]
        for family in dict.fromkeys(c.family for c in comps):
            at = [c for c in comps if c.family == family]
            inside = [c for c in at if c.tested and c.in_family]
            rows.append(family_row(family, [f"{c.target.row_name} − {c.reference.row_name}" for c in inside],
                             [c.all.stats.n for c in inside], [c.all.p_holm for c in inside], len(at) - len(inside)))
    if auc is not None and not auc.empty:
        pairs = auc[auc.kind == "pair"]
        for family, g in pairs.groupby("family", sort=False):
            tested = g[np.isfinite(g.p_exact.astype(float))]
            rows.append(family_row(str(family), [f"{a} − {b}" for a, b in zip(tested.method, tested.vs)],
                             [int(n) for n in tested.n], list(tested.p_holm.astype(float)), len(g) - len(tested)))
    return pd.DataFrame(rows, columns=FAMILY_COLUMNS)


FAMILIES_TEXT = (
    "Every p-value answers one declared family, the same in every report of this protocol (docs/protocol.md §5). "
    "A family is `task/group/level/kind`; Holm runs within it, so adding a level, a recover run, an ablation or "
    "another reference never moves a primary p. **primary**: the methods of one level against the reference of "
    "their condition (prune-only: the original; prune+recover: the fine-tuning control). Secondary: **pairwise** "
    "(pairs of those methods), **vs-original** (recovered rows and the control against the original), "
    "**own-fine-tuning** (a method's own re-trained weights), **ablation** (a side is an ablation of a method), "
    "**vs-NAME** (another `--against` reference), and the area pairs `task/condition/area/pairwise`. Null-reward "
    "controls and superseded rows keep their exact p outside every family (`outside`).\n")


def families_section(families: pd.DataFrame, limit: int = 80) -> list[str]:
    """The "Families" section: the text above and the table of the families (primary first), at most ``limit``
    rows shown (all in ``families.csv``)."""
    if families.empty:
        return []
    order = families.assign(_p=families.role != "primary").sort_values("_p", kind="stable").drop(columns="_p")
    shown = order[order["size"] > 0]
    table = pd.DataFrame({
        "family": [f"`{f}`" for f in shown.family], "size": shown["size"].astype(str), "n": shown.n.astype(str),
        "smallest Holm p": [f"{p:.3g}" if np.isfinite(p) else "—" for p in shown.min_p_holm],
        "significant": shown.significant.astype(str), "outside": shown.outside.astype(str)})
    more = len(table) - limit
    md = ["## Families\n", FAMILIES_TEXT, md_table(table.head(limit))]
    if more > 0:
        md.append(f"\n({more} more families in `families.csv`, with their members.)")
    empty = int((order["size"] == 0).sum())
    if empty:
        md.append(f"\n{empty} famil{'y' if empty == 1 else 'ies'} without a test (every member untested or outside) "
                  "are listed in `families.csv` only.")
    return md + [""]
