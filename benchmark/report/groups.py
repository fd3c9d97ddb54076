"""The condition groups of a task's records (one table each in the report) and its base-failed seeds: what the
analysis (:mod:`benchmark.report.analysis`) splits a task's frame by before any statistic."""
from __future__ import annotations

import pandas as pd

from headprune_bench.benchmark.store.records import CONTROL, ORIGINAL, OWN, PRUNE_ONLY, RECOVER, is_repair_condition

GROUPS = (RECOVER, PRUNE_ONLY)
"""The condition groups, headline first (the group of a unit is :meth:`Unit.group`); each repair condition
``prune+<repair>`` present is a group after them."""


def group_frames(tdf: pd.DataFrame):
    """(group, frame) of each condition group of one task's frame that has rows, headline first, then each repair
    condition ``prune+<repair>`` (its rows and the unpruned original, their reference), in name order."""
    unpruned = (tdf.method == ORIGINAL) & (tdf.condition == PRUNE_ONLY)
    repairs = sorted(c for c in tdf.condition.unique() if is_repair_condition(c))
    for group in (*GROUPS, *repairs):
        if group == PRUNE_ONLY:
            gdf = tdf[tdf.condition == PRUNE_ONLY]
        elif group == RECOVER:
            if not tdf.condition.isin([RECOVER, CONTROL, OWN]).any():
                continue
            gdf = tdf[tdf.condition.isin([RECOVER, CONTROL, OWN]) | unpruned]
        else:
            gdf = tdf[(tdf.condition == group) | unpruned]
        if not gdf.empty:
            yield group, gdf


def base_failed_seeds(tdf: pd.DataFrame) -> list[int]:
    """The seeds of one task's frame whose base model failed: a record of the seed says so (``base_failed``, set by
    the runner from the unpruned cell), or the unpruned prune-only cell is itself degenerate."""
    flagged = tdf.base_failed.astype(bool) | ((tdf.method == ORIGINAL) & (tdf.condition == PRUNE_ONLY)
                                              & tdf.degenerate.astype(bool))
    return sorted(int(s) for s in tdf.seed[flagged].unique())
