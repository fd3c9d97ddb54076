"""What a run's remaining work is expected to cost, for its progress line and ``bench run --dry-run``.

A cell or base fine-tune is estimated from the folder's finished work of the same kind (the median, on this
machine when it has any, else on any), else as the package's cost ratio of its kind (``cost_ratios.json``, written
by ``scripts/cost_ratios.py`` from committed runs) times the task's base fine-tune on this machine (recorded, or
scaled by train examples from another task's). ``--time-limit`` keeps its own, cautious estimates
(:mod:`.time_limit`). See docs/choices.md ("Expected time").
"""
from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headprune_bench.benchmark.execution.stopping import duration_text
from headprune_bench.benchmark.execution.time_limit import Machine, cost_parts, machine_of
from headprune_bench.benchmark.store.folder import base_train_infos
from headprune_bench.benchmark.store.records import ORIGINAL, PRUNE_ONLY

RATIOS_FILE = Path(__file__).with_name("cost_ratios.json")
"""The shipped cost ratios (:class:`CostRatios`)."""


def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


@dataclass
class Typical:
    """Median wall times (s) of finished work: prune steps by ``task|method``, the rest of a cell by
    ``task|method|condition``, base fine-tunes by task and per train example."""

    prune: dict[str, list[float]] = field(default_factory=dict)
    rest: dict[str, list[float]] = field(default_factory=dict)
    base: dict[str, list[float]] = field(default_factory=dict)
    per_example: list[float] = field(default_factory=list)
    own_steps: dict[str, float | None] = field(default_factory=dict)

    def add_record(self, record: dict[str, Any]) -> None:
        """Learn a finished cell (a record as ``records.jsonl`` stores it; its prune-only record first)."""
        pruned, prune, rest = cost_parts(record, self.own_steps)
        if pruned and not (record.get("trace") or {}).get("score_pass"):  # (a derived level's step is a look-up)
            self.prune.setdefault(f"{record['task']}|{record['method']}", []).append(prune)
        self.rest.setdefault(f"{record['task']}|{record['method']}|{record['condition']}", []).append(rest)

    def add_base(self, task: str, info: dict[str, Any]) -> None:
        """Learn a base fine-tune from its ``train_info`` (``wall_s``; ``examples``); unusable ones are skipped."""
        wall, examples = info.get("wall_s"), info.get("examples")
        if not isinstance(wall, (int, float)) or not wall > 0:
            return
        self.base.setdefault(task, []).append(float(wall))
        if isinstance(examples, int) and examples > 0:
            self.per_example.append(wall / examples)

    def cell(self, task: str, method: str, condition: str, prunes: bool) -> float | None:
        """Median seconds of such a cell, or None when none was recorded."""
        rest = _median(self.rest.get(f"{task}|{method}|{condition}"))
        if rest is None or not prunes:
            return rest
        prune = _median(self.prune.get(f"{task}|{method}"))
        return None if prune is None else prune + rest

    def base_estimate(self, task: str, examples: int | None) -> float | None:
        """Median seconds of ``task``'s base fine-tune, else the median per example times ``examples``, or None."""
        own = _median(self.base.get(task))
        if own is not None or not examples:
            return own
        rate = _median(self.per_example)
        return None if rate is None else rate * examples


@dataclass(frozen=True)
class CostRatios:
    """Seconds of a kind of cell per second of its (task, seed)'s base fine-tune, medians over committed runs.

    Attributes:
        prune: method -> its prune step's ratio (over every task).
        rest: ``method|condition`` -> the ratio of the rest of the cell (recovery, evaluation; every task).
        source: where they were computed from (the script's note).
        tasks: task -> its own ``{"prune": ..., "rest": ...}``, used first.
    """

    prune: dict[str, float]
    rest: dict[str, float]
    source: str = ""
    tasks: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    @classmethod
    def load(cls, preset: str, path: Path = RATIOS_FILE) -> CostRatios:
        """The ratios of ``preset`` in ``path`` (none for a preset the file does not hold, or no file)."""
        data = json.loads(path.read_text()).get("presets", {}).get(preset) if path.exists() else None
        if not data:
            return cls({}, {}, f"no committed run of preset {preset} in {path.name}")
        return cls(data["prune"], data["rest"], data.get("source", ""), data.get("tasks", {}))

    def cell(self, task: str, method: str, condition: str, prunes: bool) -> float | None:
        """The ratio of such a cell (``task``'s own, else over every task), or None for a kind the committed runs
        never recorded."""
        for tables in (self.tasks.get(task, {}), {"prune": self.prune, "rest": self.rest}):
            rest = tables.get("rest", {}).get(f"{method}|{condition}")
            prune = tables.get("prune", {}).get(method)
            if rest is not None and (not prunes or prune is not None):
                return rest + (prune if prunes else 0.0)
        return None


@dataclass(frozen=True)
class Work:
    """A piece of a run's work: a cell (``method`` set) or the base fine-tune of (``task``, its seed)."""

    task: str
    method: str | None = None
    condition: str = ""
    prunes: bool = False


@dataclass
class Estimator:
    """The estimate of one :class:`Work` from the folder's finished work (``here``: this machine's; ``pooled``:
    any machine's) and the shipped ratios; ``examples``: each task's train examples (base fine-tunes of tasks
    not yet fine-tuned here are scaled by them)."""

    here: Typical
    pooled: Typical
    ratios: CostRatios
    examples: dict[str, int]
    here_machine: Machine | None = None

    @classmethod
    def of_folder(cls, records: Iterable[dict[str, Any]], base_dir: Path, here: Machine | None,
                  examples: dict[str, int], ratios: CostRatios) -> Estimator:
        """From a folder's records and base ``train_info.json`` files, for a run on ``here``."""
        est = cls(Typical(), Typical(), ratios, examples, here)
        for record in sorted(records, key=lambda r: r["condition"] != PRUNE_ONLY):
            est.learn_record(record)
        for (task, _), info in base_train_infos(base_dir).items():
            est.learn_base(task, info)
        return est

    def _ours(self, what: dict[str, Any]) -> bool:
        machine = machine_of(what)
        return machine is None or machine == self.here_machine

    def learn_record(self, record: dict[str, Any]) -> None:
        """Learn a finished cell."""
        self.pooled.add_record(record)
        if self._ours(record.get("cost") or {}):
            self.here.add_record(record)

    def learn_base(self, task: str, info: dict[str, Any]) -> None:
        """Learn a finished base fine-tune."""
        self.pooled.add_base(task, info)
        if self._ours(info):
            self.here.add_base(task, info)

    def base(self, task: str) -> float | None:
        """Expected seconds of a base fine-tune of ``task``, or None."""
        for typical in (self.here, self.pooled):
            if (estimate := typical.base_estimate(task, self.examples.get(task))) is not None:
                return estimate
        return None

    def __call__(self, work: Work) -> float | None:
        """Expected seconds of ``work``, or None when nothing estimates it yet."""
        if work.method is None:
            return self.base(work.task)
        for typical in (self.here, self.pooled):
            if (own := typical.cell(work.task, work.method, work.condition, work.prunes)) is not None:
                return own
        ratio, base = self.ratios.cell(work.task, work.method, work.condition, work.prunes), self.base(work.task)
        return None if ratio is None or base is None else ratio * base


@dataclass
class Eta:
    """The work a run has left, expected (:class:`Estimator`), on ``slots`` cells at a time.

    Attributes:
        left: key -> the :class:`Work` not finished yet.
    """

    estimator: Estimator
    left: dict[str, Work]
    slots: int = 1

    def finished(self, key: str, record: dict[str, Any] | None = None, base_info: dict[str, Any] | None = None) -> None:
        """``key`` is done (or will not run); a finished cell's record or base fine-tune's info refines the rest."""
        work = self.left.pop(key, None)
        if record is not None:
            self.estimator.learn_record(record)
        if base_info is not None and work is not None:
            self.estimator.learn_base(work.task, base_info)

    def totals(self) -> tuple[float, int, int]:
        """(expected seconds of the estimated work, its count, the count of work nothing estimates yet)."""
        estimates = [self.estimator(work) for work in self.left.values()]
        known = [e for e in estimates if e is not None]
        return sum(known), len(known), len(estimates) - len(known)

    def text(self) -> str:
        """``about 12.5 h left (2 at a time)``, with what is not estimated yet."""
        seconds, known, unknown = self.totals()
        if not known and not unknown:
            return "nothing left"
        if not known:
            return "known after the first base fine-tune"
        at_once = f", {self.slots} at a time" if self.slots > 1 else ""
        rest = f"; {unknown} more not estimated yet" if unknown else ""
        return f"about {duration_text(seconds / max(1, self.slots))} left ({known} pieces of work{at_once}{rest})"


def plan_work(planned: Iterable[Any], todo: set[str], stored: set[str], ranks_once, base_missing) -> dict[str, Work]:
    """The :class:`Work` of a plan: each cell of ``todo`` (:class:`~headprune_bench.benchmark.store.records.CellKey`
    in ``planned``), whether it will prune as far as the plan tells (a condition that reuses the prune-only cell's
    step does not, nor a level that derives its mask from another level's scores: ``ranks_once(method)``), and a
    base fine-tune per (task, seed) with ``base_missing(task, seed)`` and a cell to do."""
    work: dict[str, Work] = {}
    scored: set[tuple[str, int, str]] = set()
    for cell in planned:
        key = str(cell)
        if key not in todo:
            if cell.condition == PRUNE_ONLY and key in stored:
                scored.add((cell.task, cell.seed, cell.method))
            continue
        if base_missing(cell.task, cell.seed):
            work.setdefault(f"base|{cell.task}|{cell.seed}", Work(cell.task))
        prunes = cell.method != ORIGINAL and cell.condition == PRUNE_ONLY
        if prunes and ranks_once(cell.method):
            prunes = (cell.task, cell.seed, cell.method) not in scored
            scored.add((cell.task, cell.seed, cell.method))
        work[key] = Work(cell.task, cell.method, cell.condition, prunes)
    return work
