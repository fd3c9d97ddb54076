"""``bench run --time-limit``: start a cell (or base fine-tune) only if it should finish within the time left.

Estimates come from the folder's finished work of the same task, method and condition (:class:`CellTimes`),
by the machine that recorded it (:class:`MachineTimes`), times :data:`MARGIN`. See docs/choices.md ("Time limit").
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headprune_bench.benchmark.store.folder import base_train_infos
from headprune_bench.benchmark.store.records import ORIGINAL, PRUNE_ONLY

MARGIN = 1.25
"""Estimates are multiplied by this before they are compared with the time left."""

def _key(*parts: Any) -> str:
    return "|".join(str(p) for p in parts)


def cost_parts(record: dict[str, Any], own_steps: dict[str, float | None]) -> tuple[bool, float, float]:
    """``(pruned, prune step s, rest s)`` of a record: whether the cell ran its prune step (a prune-only cell's
    step is noted in ``own_steps``, so that a later cell that copied its time is recognised as reusing it), that
    step's seconds, and the cell's other seconds."""
    cost = record.get("cost") or {}
    wall, prune = float(cost.get("wall_s") or 0.0), float(cost.get("prune_wall_s") or 0.0)
    step_key = _key(record["task"], record["seed"], record["method"], (record.get("budget") or {}).get("spec"))
    if record["condition"] == PRUNE_ONLY:
        own_steps[step_key] = cost.get("prune_wall_s")
    own_step = own_steps.get(step_key)
    if record["method"] == ORIGINAL:  # the unpruned model: no prune step
        pruned = False
    elif record["condition"] == PRUNE_ONLY:  # it pruned (random's step may round to 0.0 s: still known)
        pruned = True
    elif own_step is None:
        pruned = wall >= prune
    else:  # the prune-only cell's time copied: its prune step reused
        pruned = prune != own_step
    return pruned, prune, wall - prune if pruned else wall


@dataclass
class CellTimes:
    """The longest wall times (s) of a run folder's finished work, by what they were (docs/choices.md).

    Attributes:
        prune: ``task|method`` -> the longest prune step.
        rest: ``task|method|condition`` -> the longest time besides the prune step.
        base: ``task`` -> the longest base fine-tune.
        base_shortest: ``task`` -> the shortest base fine-tune, and the shortest per train example (s/example;
            None when no ``train_info`` gave an example count), which scale estimates between tasks.
        longest: the longest cell or base fine-tune of any kind (0.0: nothing recorded).
        own_steps: ``task|seed|method|budget`` -> the prune-only record's ``prune_wall_s`` (recognises reused
            steps).
    """

    prune: dict[str, float] = field(default_factory=dict)
    rest: dict[str, float] = field(default_factory=dict)
    base: dict[str, float] = field(default_factory=dict)
    base_shortest: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    longest: float = 0.0
    own_steps: dict[str, float | None] = field(default_factory=dict)

    @classmethod
    def of_folder(cls, records: Iterable[dict[str, Any]], base_dir: Path) -> CellTimes:
        """From ``records`` (as ``records.jsonl`` stores them; prune-only records are read first) and the
        ``train_info.json`` of each base model under ``base_dir`` (folders ``<task>-seed<N>``; an unreadable one is
        left out)."""
        return _learn_folder(cls(), records, base_dir)

    def add_record(self, record: dict[str, Any]) -> None:
        """Learn a finished cell's times (a record as ``records.jsonl`` stores it). A cell that reuses a prune
        step is recognised only when its prune-only record was added before it (as a run finishes them)."""
        pruned, prune, rest = cost_parts(record, self.own_steps)
        if pruned:
            self._keep(self.prune, _key(record["task"], record["method"]), prune)
        self._keep(self.rest, _key(record["task"], record["method"], record["condition"]), rest)
        self.longest = max(self.longest, float((record.get("cost") or {}).get("wall_s") or 0.0))

    def add_base(self, task: str, info: dict[str, Any]) -> None:
        """Learn a base fine-tune's time from its ``train_info`` (``wall_s``; ``examples``, the train split's size).

        Raises:
            KeyError, TypeError, ValueError: ``info`` has no finite number ``wall_s``.
        """
        wall = float(info["wall_s"])
        if not math.isfinite(wall):  # (edited by hand: NaN would refuse every cell, inf fit every one)
            raise ValueError(f"train_info wall_s {info['wall_s']!r}: expected a finite number of seconds")
        examples = info.get("examples")
        self._keep(self.base, task, wall)
        self.longest = max(self.longest, wall)
        if wall <= 0:  # (a time rounded to 0, or edited by hand: nothing to scale by)
            return
        per_example = wall / examples if isinstance(examples, int) and examples > 0 else None
        shortest, shortest_per_example = self.base_shortest.get(task, (math.inf, None))
        known = [v for v in (shortest_per_example, per_example) if v is not None]
        self.base_shortest[task] = (min(shortest, wall), min(known, default=None))

    def base_estimate(self, task: str) -> float | None:
        """Estimated seconds of a base fine-tune of ``task`` (before :data:`MARGIN`): the longest recorded, or None."""
        return self.base.get(task)

    @staticmethod
    def _keep(table: dict[str, float], key: str, value: float) -> None:
        table[key] = max(table.get(key, 0.0), value)

    def cell(self, task: str, method: str, condition: str, prunes: bool) -> float | None:
        """Estimated seconds of a cell (before :data:`MARGIN`): from its task's records, else from another task's
        scaled (docs/choices.md); None when neither estimates it."""
        own = self.recorded(task, method, condition, prunes)
        if own is not None:
            return own
        guesses = []
        for other in {k.split("|", 1)[0] for k in self.rest} - {task}:
            recorded, scale = self.recorded(other, method, condition, prunes), self.scale(task, other)
            if recorded is not None and scale is not None:
                guesses.append(recorded * scale)
        return min(min(guesses), self.longest) if guesses else None  # each guess is scaled up already

    def recorded(self, task: str, method: str, condition: str, prunes: bool) -> float | None:
        """Estimated seconds of a cell from ``task``'s own records alone (no other task's scaled), or None."""
        rest = self.rest.get(_key(task, method, condition))
        if rest is None:
            return None
        if not prunes:
            return rest
        prune = self.prune.get(_key(task, method))
        return None if prune is None else prune + rest

    def scale(self, task: str, other: str) -> float | None:
        """How many times longer work on ``task`` is taken to be than on ``other``: the larger of 1 and the ratios
        of their shortest base fine-tunes, in seconds and in seconds per example; None without a base fine-tune
        of both (with a positive time)."""
        if task not in self.base_shortest or other not in self.base_shortest:
            return None
        (wall, per_example), (other_wall, other_per_example) = self.base_shortest[task], self.base_shortest[other]
        ratios = [1.0, wall / other_wall]
        if per_example is not None and other_per_example is not None:
            ratios.append(per_example / other_per_example)
        return max(ratios)


def _learn_folder(times: Any, records: Iterable[dict[str, Any]], base_dir: Path) -> Any:
    """``times`` after learning ``records`` (prune-only first) and each readable base ``train_info.json``."""
    for record in sorted(records, key=lambda r: r["condition"] != PRUNE_ONLY):
        times.add_record(record)
    for (task, _), info in base_train_infos(base_dir).items():
        try:
            times.add_base(task, info)
        except (ValueError, KeyError, TypeError):
            continue
    return times


Machine = tuple[str, int]
"""What ran a record or base fine-tune: the CPU's or GPU's name and torch's threads
(:func:`headprune_bench.benchmark.provenance.machine_name`; a record's ``cost.machine`` and ``cost.threads``)."""


def machine_of(what: dict[str, Any]) -> Machine | None:
    """The :data:`Machine` a record's ``cost`` or a ``train_info`` names (``machine``, ``threads``), or None when
    it names no machine or thread count (written before records named them)."""
    name, threads = what.get("machine"), what.get("threads")
    if isinstance(name, str) and name and isinstance(threads, int) and not isinstance(threads, bool) and threads > 0:
        return name, threads
    return None


@dataclass
class MachineTimes:
    """A run's estimates from the times of a folder's work, by the machine that did it (docs/choices.md, rules
    1-3). The same interface as :class:`CellTimes` (``add_record``, ``add_base``, ``cell``, ``base_estimate``,
    ``longest``), which it holds one of per machine.

    Attributes:
        here: the :data:`Machine` this run's cells run on, or None (a Ray cluster: every estimate by rule 3).
        pooled: the times of all the folder's work, whatever ran it (rule 3).
        machines: each named :data:`Machine` -> the times of the work it ran (rules 1 and 2).
    """

    here: Machine | None = None
    pooled: CellTimes = field(default_factory=CellTimes)
    machines: dict[Machine, CellTimes] = field(default_factory=dict)

    @classmethod
    def of_folder(cls, records: Iterable[dict[str, Any]], base_dir: Path,
                  here: Machine | None = None) -> MachineTimes:
        """From ``records`` and ``base_dir``'s ``train_info.json`` files, as :meth:`CellTimes.of_folder`, for a run
        on ``here``."""
        return _learn_folder(cls(here), records, base_dir)

    @property
    def longest(self) -> float:
        """The longest cell or base fine-tune recorded on any machine (0.0: nothing recorded)."""
        return self.pooled.longest

    def add_record(self, record: dict[str, Any]) -> None:
        """Learn a finished cell's times (:meth:`CellTimes.add_record`), pooled and under its machine."""
        self.pooled.add_record(record)
        machine = machine_of(record.get("cost") or {})
        if machine is not None:
            self._of(machine).add_record(record)

    def add_base(self, task: str, info: dict[str, Any]) -> None:
        """Learn a base fine-tune's time (:meth:`CellTimes.add_base`), pooled and under its machine.

        Raises:
            KeyError, TypeError, ValueError: ``info`` has no finite number ``wall_s``.
        """
        self.pooled.add_base(task, info)
        machine = machine_of(info)
        if machine is not None:
            self._of(machine).add_base(task, info)

    def _of(self, machine: Machine) -> CellTimes:
        """``machine``'s times, sharing the pool's ``own_steps`` (a stored prune step is reused whatever machine
        computed it)."""
        if machine not in self.machines:
            self.machines[machine] = CellTimes(own_steps=self.pooled.own_steps)
        return self.machines[machine]

    def speed(self, machine: Machine) -> float | None:
        """How many times longer work takes on :attr:`here` than on ``machine``: the largest, over the tasks both
        fine-tuned a base model of (with a positive time), of the ratio of their shortest fine-tunes, per train
        example when both give an example count, else in seconds; None without such a task."""
        here, other = self.machines.get(self.here) if self.here else None, self.machines.get(machine)
        if here is None or other is None:
            return None
        ratios = []
        for task, (wall, per_example) in here.base_shortest.items():
            if task in other.base_shortest:
                other_wall, other_per_example = other.base_shortest[task]
                both = per_example is not None and other_per_example is not None
                ratios.append(per_example / other_per_example if both else wall / other_wall)
        return max(ratios, default=None)

    def _estimate(self, recorded: Callable[[CellTimes], float | None],
                  pooled: Callable[[], float | None]) -> float | None:
        """Rules 1-3: ``recorded(times)``, one machine's estimate (None: none), here, else scaled from the other
        machines; else ``pooled()``, rule 3's."""
        here = self.machines.get(self.here) if self.here else None
        if here is not None and (own := recorded(here)) is not None:
            return own
        scaled = [estimate * speed for machine, times in self.machines.items() if machine != self.here
                  if (estimate := recorded(times)) is not None and (speed := self.speed(machine)) is not None]
        return max(scaled) if scaled else pooled()

    def cell(self, task: str, method: str, condition: str, prunes: bool) -> float | None:
        """Estimated seconds of a cell (before :data:`MARGIN`; docs/choices.md, rules 1-3), or None."""
        return self._estimate(lambda times: times.cell(task, method, condition, prunes),
                              lambda: self.pooled.cell(task, method, condition, prunes))

    def base_estimate(self, task: str) -> float | None:
        """Estimated seconds of a base fine-tune of ``task`` (before :data:`MARGIN`; rules 1-3), or None."""
        return self._estimate(lambda times: times.base_estimate(task), lambda: self.pooled.base_estimate(task))


@dataclass
class TimeLimit:
    """The run's deadline and the estimates it is checked with (picklable: Ray's status board holds one).

    Attributes:
        deadline: ``time.time()`` by which started work should have finished.
        times: the wall times recorded in the folder and by this run (:class:`MachineTimes`, or
            :class:`CellTimes`: every time as if one machine had recorded it).
        margin: the factor estimates are multiplied by (:data:`MARGIN`).
    """

    deadline: float
    times: MachineTimes | CellTimes
    margin: float = MARGIN

    @classmethod
    def starting_now(cls, seconds: float, times: MachineTimes | CellTimes) -> TimeLimit:
        """A limit of ``seconds`` from now."""
        return cls(time.time() + seconds, times)

    def left(self, now: float | None = None) -> float:
        """Seconds left (negative once the deadline passed)."""
        return self.deadline - (time.time() if now is None else now)

    def refusal(self, estimate: float | None, now: float | None = None) -> str | None:
        """Why work estimated at ``estimate`` seconds (None: unknown; docs/choices.md, "Time limit") should not
        start (it would not finish before the deadline), or None: it fits."""
        left = self.left(now)
        if estimate is None:
            if left > 0 and left >= self.margin * self.times.longest:
                return None
            return (f"time limit: no recorded time estimates it, and {left:.0f} s left < {self.margin} x the "
                    f"longest recorded work ({self.times.longest:.0f} s)")
        if self.margin * estimate <= left:
            return None
        return f"time limit: expected {estimate:.0f} s x {self.margin} > {left:.0f} s left"

    def fits(self, estimate: float | None, now: float | None = None) -> bool:
        """Whether work estimated at ``estimate`` seconds should finish before the deadline (:meth:`refusal`)."""
        return self.refusal(estimate, now) is None

    def cell_refusal(self, task: str, method: str, condition: str, prunes: bool,
                     now: float | None = None) -> str | None:
        """Why a cell (``prunes``: it will run its method's prune step) should not start, or None: it fits."""
        return self.refusal(self.times.cell(task, method, condition, prunes), now)

    def base_refusal(self, task: str, now: float | None = None) -> str | None:
        """Why a base fine-tune of ``task`` should not start, or None: it fits."""
        return self.refusal(self.times.base_estimate(task), now)

    def fits_cell(self, task: str, method: str, condition: str, prunes: bool, now: float | None = None) -> bool:
        """Whether a cell (``prunes``: it will run its method's prune step) should finish before the deadline."""
        return self.cell_refusal(task, method, condition, prunes, now) is None

    def fits_base(self, task: str, now: float | None = None) -> bool:
        """Whether a base fine-tune of ``task`` should finish before the deadline."""
        return self.base_refusal(task, now) is None
