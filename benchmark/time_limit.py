"""``bench run --time-limit``: start a cell only if it should finish within the time the run has left.

A long run spans sittings (a SLURM job's walltime, a session), and a cell cut off at the end is lost: an AUBER cell
is half an hour of one CPU. With ``--time-limit 2h30m`` the runner (serial, and each Ray task through the driver's
status board) asks :meth:`TimeLimit.fits` before it starts a cell or a base fine-tune; one that does not fit is not
started (neither a record nor a failure: the next run computes it), and shorter cells may still fill the time left.
The run then ends with the cells left to do, like the first Ctrl-C (:mod:`benchmark.stopping`), and the same command
resumes it.

What a cell will take comes from the folder's finished cells of the same task, method and condition
(:class:`CellTimes`), times :data:`MARGIN`:

* a record's wall time splits into its prune step (``cost.prune_wall_s``, when the cell pruned) and the rest (dev
  evaluation, recovery, the control's fine-tune). A ``prune+recover`` or ``own-fine-tuning`` cell that reused its
  prune-only cell's prune step carries that step's time, the same number as the prune-only record of its (task,
  seed, method): all its wall time is "rest". (Without that record, a cell whose wall time is shorter than its
  ``prune_wall_s`` reused it; one at least as long is taken to have pruned.)
* a cell is estimated as the longest "rest" of its (task, method, condition), plus the longest prune step of its
  (task, method) when it will prune (a prune-only cell, or an ``own-fine-tuning`` cell of a resumed run, which
  prunes again for the weights);
* a base fine-tune as the longest one recorded for the task (``base/*/train_info.json``).

A cell that nothing recorded can estimate (a new task or method) starts only while the time left is at least the
longest cell or fine-tune the folder has recorded, times :data:`MARGIN`; in a folder with no record it starts while
any time is left. Times recorded on another machine or under other load estimate this one's only roughly: the
margin covers some of it, not a slower machine.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from benchmark.config import ConfigError
from benchmark.records import ORIGINAL, PRUNE_ONLY

MARGIN = 1.25
"""Estimates are multiplied by this before they are compared with the time left."""

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds of ``--time-limit``: ``2h30m``, ``90m``, ``1.5h``, ``45m30s``, ``5400s`` or ``5400`` (seconds).

    Raises:
        ConfigError: anything else, or a duration of 0.
    """
    clean = text.strip().lower()
    match = _DURATION.fullmatch(clean)
    if not clean or match is None or not any(match.groups()) or re.search(r"[hm][\d.]+$", clean):
        raise ConfigError(f"--time-limit {text!r}: expected a duration such as 2h30m, 90m, 1.5h or 5400 (seconds)")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ConfigError(f"--time-limit {text!r}: expected a duration > 0")
    return total


def _key(*parts: Any) -> str:
    return "|".join(str(p) for p in parts)


@dataclass
class CellTimes:
    """The longest wall times (s) of a run folder's finished work, by what they were (module docstring).

    Attributes:
        prune: ``task|method`` -> the longest prune step.
        rest: ``task|method|condition`` -> the longest time besides the prune step.
        base: ``task`` -> the longest base fine-tune.
        longest: the longest cell or base fine-tune of any kind (0.0: nothing recorded).
    """

    prune: dict[str, float] = field(default_factory=dict)
    rest: dict[str, float] = field(default_factory=dict)
    base: dict[str, float] = field(default_factory=dict)
    longest: float = 0.0

    @classmethod
    def of_folder(cls, records: Iterable[dict[str, Any]], base_dir: Path) -> "CellTimes":
        """From ``records`` (as ``records.jsonl`` stores them) and the ``train_info.json`` of each base model
        under ``base_dir`` (folders ``<task>-seed<N>``; an unreadable one is left out)."""
        times, records = cls(), list(records)
        prune_only = {_key(r["task"], r["seed"], r["method"]): (r.get("cost") or {}).get("prune_wall_s")
                      for r in records if r["condition"] == PRUNE_ONLY}
        for record in records:
            cost = record.get("cost") or {}
            wall, prune = float(cost.get("wall_s") or 0.0), float(cost.get("prune_wall_s") or 0.0)
            own_step = prune_only.get(_key(record["task"], record["seed"], record["method"]))
            if record["method"] == ORIGINAL:  # the unpruned model: no prune step
                pruned = False
            elif record["condition"] == PRUNE_ONLY:  # it pruned (random's step may round to 0.0 s: still known)
                pruned = True
            elif own_step is None:
                pruned = wall >= prune
            else:  # the prune-only cell's time copied: its prune step reused
                pruned = prune != own_step
            if pruned:
                times._keep(times.prune, _key(record["task"], record["method"]), prune)
            times._keep(times.rest, _key(record["task"], record["method"], record["condition"]),
                        wall - prune if pruned else wall)
            times.longest = max(times.longest, wall)
        for info_file in sorted(base_dir.glob("*-seed*/train_info.json")) if base_dir.is_dir() else []:
            try:
                wall = float(json.loads(info_file.read_text())["wall_s"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            times._keep(times.base, info_file.parent.name.rsplit("-seed", 1)[0], wall)
            times.longest = max(times.longest, wall)
        return times

    @staticmethod
    def _keep(table: dict[str, float], key: str, value: float) -> None:
        table[key] = max(table.get(key, 0.0), value)

    def cell(self, task: str, method: str, condition: str, prunes: bool) -> float | None:
        """Estimated seconds of a cell (before :data:`MARGIN`), or None when the folder has no such cell (or, when
        it ``prunes``, no prune step of its method on the task)."""
        rest = self.rest.get(_key(task, method, condition))
        if rest is None:
            return None
        if not prunes:
            return rest
        prune = self.prune.get(_key(task, method))
        return None if prune is None else prune + rest


@dataclass
class TimeLimit:
    """The run's deadline and the estimates it is checked with (picklable: Ray's status board holds one).

    Attributes:
        deadline: ``time.time()`` by which started work should have finished.
        times: the folder's recorded wall times.
        margin: the factor estimates are multiplied by (:data:`MARGIN`).
    """

    deadline: float
    times: CellTimes
    margin: float = MARGIN

    @classmethod
    def starting_now(cls, seconds: float, times: CellTimes) -> "TimeLimit":
        """A limit of ``seconds`` from now."""
        return cls(time.time() + seconds, times)

    def left(self, now: float | None = None) -> float:
        """Seconds left (negative once the deadline passed)."""
        return self.deadline - (time.time() if now is None else now)

    def fits(self, estimate: float | None, now: float | None = None) -> bool:
        """Whether work estimated at ``estimate`` seconds (None: unknown, see the module docstring) should finish
        before the deadline."""
        left = self.left(now)
        if estimate is None:
            return left > 0 and left >= self.margin * self.times.longest
        return self.margin * estimate <= left

    def fits_cell(self, task: str, method: str, condition: str, prunes: bool, now: float | None = None) -> bool:
        """Whether a cell (``prunes``: it will run its method's prune step) should finish before the deadline."""
        return self.fits(self.times.cell(task, method, condition, prunes), now)

    def fits_base(self, task: str, now: float | None = None) -> bool:
        """Whether a base fine-tune of ``task`` should finish before the deadline."""
        return self.fits(self.times.base.get(task), now)
