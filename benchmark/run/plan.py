"""A run's plan as a user reads it before and while it runs: the expected time of the work to do
(:mod:`benchmark.execution.eta`) and ``bench run --dry-run``'s listing."""
from __future__ import annotations

from collections import Counter
from typing import Any

from headprune_bench.benchmark.execution.eta import CostRatios, Estimator, Eta, plan_work
from headprune_bench.benchmark.execution.stopping import duration_text
from headprune_bench.benchmark.store.folder import BASE_DIR
from headprune_bench.benchmark.store.records import CellKey


def train_examples(runner: Any) -> dict[str, int]:
    """Each task's train examples under the run's preset (its cap applied), which a base fine-tune's time scales
    with."""
    cap = runner.cfg.preset.max_train_examples
    return {name: min(len(raw["train"]), cap) if cap else len(raw["train"]) for name, raw in runner.raw.items()}


def make_eta(runner: Any, planned: list[CellKey], todo: set[str]) -> Eta:
    """The :class:`Eta` of ``runner``'s cells in ``todo`` and the base fine-tunes they need."""
    estimator = Estimator.of_folder(runner.store.records(), runner.out / BASE_DIR, runner.execution.machine(),
                                    train_examples(runner), CostRatios.load(runner.cfg.preset.name))
    work = plan_work(planned, todo, {str(c) for c in planned} - todo, runner.work.ranks_once,
                     lambda task, seed: not (runner.base_folder(task, seed) / "config.json").exists())
    return Eta(estimator, work, runner.execution.workers or 1)


def dry_run_lines(runner: Any) -> list[str]:
    """What ``bench run --dry-run`` prints: each cell and base fine-tune to do with its expected time, the counts
    by method and condition, and the expected total."""
    planned = runner.planned_cells()
    todo = {str(c) for c in planned if str(c) not in runner.store}
    eta = make_eta(runner, planned, todo)
    lines = [f"bench run --dry-run: {len(planned)} cells planned, {len(todo)} to do; nothing is run or written",
             *runner.repair_skips()]
    for key, work in eta.left.items():
        seconds = eta.estimator(work)
        lines.append(f"  {key}  {'?' if seconds is None else duration_text(seconds)}")
    kinds = Counter((w.method or "base fine-tune", w.condition) for w in eta.left.values())
    lines.append("to do: " + "; ".join(f"{method} {condition}".strip() + f" {n}" for (method, condition), n
                                        in kinds.items()))
    seconds, known, unknown = eta.totals()
    lines.append(f"expected: {duration_text(seconds)} of work in all ({known} estimated"
                 + (f", {unknown} not: '?'" if unknown else "") + f"); {eta.text()}")
    lines.append(f"estimates: this folder's finished work, else ratios of {eta.estimator.ratios.source}")
    return lines


def repairable(method_names: list[str], create: Any) -> list[str]:
    """The methods of ``method_names`` whose masks ``--repair`` repairs: those whose prune-only result is a plain
    mask on the base weights (``HeadPruner.own_repair`` is None); ``create(name)`` builds a run's pruner."""
    return [name for name in method_names if create(name).own_repair() is None]


def repair_skips(method_names: list[str], create: Any) -> list[str]:
    """One line per method that ``--repair`` skips, saying why and how to run its selection alone."""
    lines = []
    for name in method_names:
        method = create(name)
        if method.own_repair() is not None:
            alone = method.selection_alone()
            lines.append(f"--repair: {name} is skipped: it applies its own repair ({method.own_repair()}) to its "
                         f"mask" + (f"; its selection alone is {alone}" if alone else ""))
    return lines
