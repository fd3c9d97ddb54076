"""Cross-task summary numbers: per unit, its mean score on each task and its mean difference vs original, and the
averages over the tasks not in :data:`EXCLUDED_FROM_AVERAGE` (WNLI), without base-failed seeds. See docs/choices.md
("Reports")."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from headprune_bench.benchmark.report.analysis import GroupResult
from headprune_bench.benchmark.report.units import EXCLUDED_FROM_AVERAGE, Unit, sorted_units, task_key
from headprune_bench.benchmark.store.records import ORIGINAL


@dataclass
class TaskScore:
    """One unit on one task (percent points): ``mean`` score and mean paired ``diff`` vs original without the
    base-failed seeds (NaN where there is none); ``ran``: the unit has rows on the task; ``majority``: the task's
    majority-class baseline (NaN where the unit did not run there)."""

    ran: bool
    mean: float = math.nan
    diff: float = math.nan
    majority: float = math.nan


@dataclass
class CrossTaskRow:
    """One unit across tasks: ``tasks`` maps task -> :class:`TaskScore`; ``n_tasks`` counts the averaged tasks
    with a mean, ``mean`` / ``diff`` average them (NaN for none); ``n_diffs`` counts the differences averaged."""

    unit: Unit
    tasks: dict[str, TaskScore] = field(default_factory=dict)
    n_tasks: int = 0
    mean: float = math.nan
    diff: float = math.nan
    n_diffs: int = 0


@dataclass
class CrossTaskSummary:
    """The cross-task summary: ``tasks`` in report order, ``averaged`` the tasks of the averages (some seed not
    base-failed, not excluded), ``beside`` the excluded tasks (shown beside their majority baseline), ``failed``
    the base-failed seeds per task, ``rows`` one per unit in table order."""

    tasks: list[str]
    averaged: list[str]
    beside: list[str]
    failed: dict[str, list[int]]
    rows: list[CrossTaskRow]


def base_failed_seeds(results: list[GroupResult]) -> dict[str, list[int]]:
    """Per task, the seeds whose unpruned base model failed (is degenerate), from every group's table."""
    out: dict[str, set[int]] = {}
    for r in results:
        out.setdefault(r.task, set()).update(r.base_failed_seeds)
    return {t: sorted(v) for t, v in out.items()}


def _mean_without(scores: dict[int, float], drop: Sequence[int]) -> float:
    kept = [v for seed, v in scores.items() if seed not in drop]
    return float(np.mean(kept)) if kept else math.nan


def _diff_without(a: dict[int, float], b: dict[int, float], drop: Sequence[int]) -> float:
    paired = [a[seed] - b[seed] for seed in a if seed in b and seed not in drop]
    return float(np.mean(paired)) if paired else math.nan


def _task_score(results: list[GroupResult], u: Unit, task: str, drop: Sequence[int]) -> TaskScore:
    """``u`` on ``task``, from its own group's table (else the first table holding it)."""
    rs = [r for r in results if r.task == task and u in r.unit_stats]
    r = next((x for x in rs if x.group == u.group()), rs[0] if rs else None)
    if r is None:
        return TaskScore(ran=False)
    scores = r.unit_stats[u].scores
    comp = r.comparison(u, ORIGINAL)
    diff = _diff_without(scores, r.unit_stats[comp.reference].scores, drop) if comp else math.nan
    return TaskScore(ran=True, mean=_mean_without(scores, drop), diff=diff, majority=r.majority)


def cross_task_summary(results: list[GroupResult]) -> CrossTaskSummary:
    """The :class:`CrossTaskSummary` of every unit of ``results``: a task's number is the mean over its seeds that
    are not base-failed (none when every seed failed); a unit's average is over the averaged tasks it has one on."""
    tasks = sorted({r.task for r in results}, key=task_key)
    failed = base_failed_seeds(results)
    averaged = [t for t in tasks if t not in EXCLUDED_FROM_AVERAGE and any(r.seeds for r in results if r.task == t)]
    rows = []
    for u in sorted_units([u for r in results for u in r.units]):
        row = CrossTaskRow(unit=u, tasks={t: _task_score(results, u, t, failed.get(t, [])) for t in tasks})
        means = [row.tasks[t] for t in averaged if np.isfinite(row.tasks[t].mean)]
        diffs = [s.diff for s in means if np.isfinite(s.diff)]
        row.n_tasks, row.n_diffs = len(means), len(diffs)
        row.mean = float(np.mean([s.mean for s in means])) if means else math.nan
        row.diff = float(np.mean(diffs)) if diffs else math.nan
        rows.append(row)
    return CrossTaskSummary(tasks=tasks, averaged=averaged, beside=[t for t in tasks if t in EXCLUDED_FROM_AVERAGE],
                            failed=failed, rows=rows)
