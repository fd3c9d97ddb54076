"""One cell, anywhere: :class:`CellWork` (the picklable part of a run) turns a (task, seed)'s
:class:`benchmark.cells.bench.SeedBench` into a :class:`benchmark.store.records.Record`.
The serial runner and the Ray workers call the same methods; every input besides the (task, seed) is passed in.
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from headprune_bench.benchmark import models, tasks, training
from headprune_bench.benchmark.cells import bench as cell
from headprune_bench.benchmark.cells.bench import SeedBench, TaskData, train_splits
from headprune_bench.benchmark.cells.levels import ScorePass, stored_pass, with_floor
from headprune_bench.benchmark.cells.repairing import repair_step
from headprune_bench.benchmark.config.presets import ConfigError
from headprune_bench.benchmark.config.run import RunConfig
from headprune_bench.benchmark.provenance import machine_name, now_utc
from headprune_bench.benchmark.store.folder import RunFolderError
from headprune_bench.benchmark.store.records import (
    BASE_CHECK_FAILED,
    BASE_DIFFERS,
    BASE_NOT_COMPARED,
    NO_BUDGET,
    ORIGINAL,
    OWN,
    OWN_BUDGET,
    PRUNE_ONLY,
    BudgetInfo,
    CellKey,
    Cost,
    Record,
    base_differs_text,
    is_repair_condition,
    read_ids,
    reuses_mask,
)
from headprune_bench.benchmark.training import Counter
from headprune_bench.methods.base import HeadPruner, PruningResult

log = logging.getLogger("benchmark")


def base_differs_message(task: str, seed: int, differ: int, total: int) -> str:
    """What a run says (stderr and ``run.log``) when :meth:`CellWork.base_check` counts ``differ`` > 0."""
    return (f"{task} seed {seed}: the base model predicts {differ} of {total} dev examples otherwise than the stored "
            f"original record of this (task, seed), so it is not the model the folder's earlier records of that "
            f"seed evaluated (fine-tuned again on another machine, or DIR/base/ replaced; one or two could also be "
            f"predictions within rounding of a tie, on another device or thread count); the cells computed now "
            f"say so in their records (trace.{BASE_DIFFERS}) and bench report warns. To compare like with like, "
            f"restore the base model those records used, or move that (task, seed)'s records aside and rerun")


def warn_other_base(record: Record, warned: set[tuple[str, int]]) -> None:
    """Warn (stderr, and ``run.log`` through the logger) when ``record`` carries :data:`BASE_DIFFERS`
    (:meth:`CellWork.finish`), once per (task, seed) of ``warned``, which it updates."""
    differ = record.trace.get(BASE_DIFFERS)
    if not differ or (record.task, record.seed) in warned:
        return
    warned.add((record.task, record.seed))
    message = base_differs_message(record.task, record.seed, int(differ), len(record.predictions))
    log.warning("%s", message)
    warnings.warn(message, stacklevel=2)


def floor_suffix(cfg: RunConfig) -> str:
    """What a per-layer floor adds to a budget spec (``/floor:M``; nothing without one)."""
    return f"/floor:{cfg.min_heads_per_layer}" if cfg.min_heads_per_layer else ""


def check_floor(floor: int, num_layers: int, num_heads: int, target: int | None) -> None:
    """Refuse, before any training, a floor above the heads of a layer or one that a fixed target cannot meet.

    Raises:
        ConfigError: naming ``--min-heads-per-layer`` and the model's sizes.
    """
    if floor > num_heads:
        raise ConfigError(f"--min-heads-per-layer {floor}: the model has {num_heads} heads per layer")
    if target is not None and target > num_layers * (num_heads - floor):
        raise ConfigError(f"--min-heads-per-layer {floor}: cannot prune {target} of {num_layers * num_heads} heads "
                          f"while every one of the {num_layers} layers keeps {floor}")


@dataclass
class PruneState:
    """A method's prune step, kept so that its ``prune+recover`` cell reuses it instead of pruning again.

    Attributes:
        result: the method's :class:`methods.base.PruningResult` (a re-trained ``model`` on the CPU when it
            travels between processes).
        prune_s: wall seconds the prune took.
        cost: the prune's ``forward_examples`` / ``backward_examples`` (counted again by the reusing cell).
        from_record: read back from a stored prune-only record (:meth:`of_record`): mask, scores and trace, but
            no re-trained model, so an ``own-fine-tuning`` cell cannot reuse it.
        score_pass: the scores the method's cells at other budget levels derive their masks from (a method that
            ranks once), or None.
    """

    result: PruningResult
    prune_s: float
    cost: dict[str, int]
    from_record: bool = False
    score_pass: ScorePass | None = None

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> PruneState:
        """The prune step a stored prune-only record holds (a resumed run's ``prune+recover`` cell reuses it, so
        it recovers exactly the stored mask instead of pruning again); its cost without the dev evaluation."""
        r = Record.from_dict(record)
        scores = None if r.scores is None else torch.tensor(r.scores, dtype=torch.float32)
        scales = None if r.head_scales is None else torch.tensor(r.head_scales, dtype=torch.float64)
        result = PruningResult(mask=torch.tensor(r.mask, dtype=torch.float32), scores=scores, trace=r.trace,
                               head_scales=scales)
        cost = {"forward_examples": max(0, r.cost.forward_examples - int(r.splits.get("dev", 0))),
                "backward_examples": r.cost.backward_examples}
        return cls(result, float(r.cost.prune_wall_s), cost, from_record=True)


def prune_input(condition: str, reuse: PruneState | None, stored_prune: dict[str, Any] | None) -> PruneState | None:
    """The prune step a cell of ``condition`` takes instead of pruning (None: it prunes), from ``reuse`` and
    ``stored_prune`` as :meth:`CellWork.run_cell` gets them: an ``own-fine-tuning`` cell needs weights, which a
    stored record has not; a ``prune+recover`` cell needs the mask alone, which the stored record has."""
    if condition == OWN and reuse is not None and reuse.from_record:
        reuse = None  # a stored record has no re-trained weights
    if reuse is None and stored_prune is not None and reuses_mask(condition):
        reuse = PruneState.of_record(stored_prune)
    return reuse


def will_prune(method: str, condition: str, reuse: PruneState | None, stored_prune: dict[str, Any] | None,
               scored: bool = False) -> bool:
    """Whether a cell runs its method's prune step (:func:`prune_input`; the unpruned model never does; nor a cell
    that derives its mask from a score pass, ``scored``)."""
    return prunes_again(method, condition, computed=scored or (reuse is not None and not reuse.from_record),
                        stored=stored_prune is not None or (reuse is not None and reuse.from_record))


def prunes_again(method: str, condition: str, computed: bool, stored: bool) -> bool:
    """Whether a cell runs its method's prune step, knowing only whether this run ``computed`` the step (it holds
    the result, weights included) and whether a prune-only record of it is ``stored`` (mask and scores, no
    weights): not the unpruned model, nor a cell with the step computed, nor a ``prune+recover`` cell with it
    stored (:func:`prune_input`). The Ray driver asks it before the step's result has reached it."""
    return method != ORIGINAL and not computed and not (reuses_mask(condition) and stored)


@dataclass
class CellWork:
    """The part of a run every cell needs, picklable so that a Ray worker gets it whole.

    Attributes:
        cfg: the run's :class:`~headprune_bench.benchmark.config.run.RunConfig` (its budget levels:
            ``cfg.budgets``, keyed as ``cfg.level_labels``).
        provenance: what every record carries (git commit, versions, model revision, data hashes, config hash).
        method_classes: the run's methods by name, so that a worker needs no registry (a method registered on
            the fly by the driver's script travels with them).
        device: where cells run.
    """

    cfg: RunConfig
    provenance: dict[str, Any]
    method_classes: dict[str, type[HeadPruner]]
    device: torch.device

    # ------------------------------------------------------------------ keys and budgets

    def create(self, method: str) -> HeadPruner:
        """A fresh pruner of ``method`` with this run's options for it."""
        return self.method_classes[method](**self.cfg.method_options.get(method, {}))

    def levels_of(self, method: str) -> list[str]:
        """The budget specs ``method``'s cells are keyed with: ``none`` for the unpruned model, ``own`` for a method
        that decides its own count (``HeadPruner.own_budget``, e.g. AUBER), the ``matched:`` level for its budget
        setter, else every level of the run, in order."""
        if method == ORIGINAL:
            return [NO_BUDGET]
        if self.method_classes[method].own_budget:
            return [OWN_BUDGET + floor_suffix(self.cfg)]
        if method == self.setter():
            return [self.cfg.level_label(self.cfg.matched)]
        return self.cfg.level_labels

    def budget_spec(self, method: str, level: str | None = None) -> str:
        """The budget spec of ``method``'s cell at ``level`` (a label of ``cfg.level_labels``; None: the first of
        :meth:`levels_of`); the unpruned model's and an own-count method's whatever the level."""
        specs = self.levels_of(method)
        return level if len(specs) > 1 and level is not None else specs[0]

    def cell_key(self, task: str, seed: int, method: str, condition: str, level: str | None = None) -> CellKey:
        """The key of a planned cell at ``level`` (:meth:`budget_spec`), with the options ``method`` runs with."""
        options = None if method == ORIGINAL else self.create(method).get_options()
        return CellKey.of(task, seed, method, self.budget_spec(method, level), condition, options)

    def key(self, task: str, seed: int, method: str, condition: str, level: str | None = None) -> str:
        """:meth:`cell_key` as the string ``records.jsonl`` stores."""
        return str(self.cell_key(task, seed, method, condition, level))

    def setter(self) -> str | None:
        """The budget setter of the ``matched:METHOD`` level (None without one)."""
        return self.cfg.matched.value if self.cfg.matched is not None else None

    def takes_setter(self, method: str, level: str | None = None) -> bool:
        """Whether ``method``'s cells at ``level`` take the budget setter's prune-only record (and so wait for it on
        Ray): at the ``matched:METHOD`` level, every method but the unpruned model, the setter itself and a method
        that decides its own count (``own_budget``, e.g. ``auber-null`` beside ``matched:auber``)."""
        setter = self.setter()
        if setter is None or method in (ORIGINAL, setter) or self.method_classes[method].own_budget:
            return False
        return self.budget_spec(method, level) == self.cfg.level_label(self.cfg.matched)

    def ranks_once(self, method: str) -> bool:
        """Whether ``method``'s cells at several levels share one score pass (``HeadPruner.ranks_once``)."""
        return method != ORIGINAL and len(self.levels_of(method)) > 1 and self.create(method).ranks_once()

    def pass_level(self, method: str) -> str | None:
        """The level whose prune-only cell scores for ``method``'s other levels on Ray (the first one whose target
        is a count, not ``--match-per-layer``'s per-layer counts); None: every cell prunes."""
        if not self.ranks_once(method):
            return None
        return next((label for label in self.cfg.level_labels if "/per-layer" not in label), None)

    # ------------------------------------------------------------------ base model and bench

    def train_base(self, data: TaskData, seed: int, tokenizer,
                   should_stop=None) -> tuple[torch.nn.Module, dict[str, Any]]:
        """Fine-tune the pre-trained model on the task's (capped) train split with ``seed``; returns the model (in
        eval mode) and its ``train_info`` (wall seconds, examples, seed, finish time, and what ran it: ``machine``,
        :func:`~headprune_bench.benchmark.provenance.machine_name`, and torch's ``threads``).

        Raises:
            training.TrainingStopped: ``should_stop()`` (asked after every step) returned True.
        """
        torch.manual_seed(seed)  # the classification head's initialisation
        model = models.load_classifier(self.cfg.model, data.spec.num_labels).to(self.device)
        start = time.time()
        training.fine_tune(model, data.train, tokenizer, self.device, self.cfg.preset.train, seed=seed,
                           desc=f"base {data.spec.name} s{seed}", progress=self.cfg.progress,
                           precision=self.cfg.precision, should_stop=should_stop)
        info = {"wall_s": time.time() - start, "examples": len(data.train), "seed": seed, "finished": now_utc(),
                "machine": machine_name(self.device), "threads": torch.get_num_threads()}
        return model.eval(), info

    def load_base(self, folder: Path) -> torch.nn.Module:
        """The cached base model in ``folder``, in fp32 on this work's device.

        Raises:
            RunFolderError: the folder cannot be loaded (a damaged or incomplete save); says to delete it.
        """
        log.info("reusing base model %s", folder)
        from transformers import AutoModelForSequenceClassification

        try:
            model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32)
        except Exception as exc:  # noqa: BLE001 - safetensors, OSError, JSON errors: all mean a damaged folder
            raise RunFolderError(f"{folder}: the cached base model cannot be loaded ({type(exc).__name__}: {exc}); "
                                 f"delete that folder and rerun to fine-tune it again") from exc
        return model.to(self.device).eval()

    def base_check(self, bench: SeedBench, original_record: dict[str, Any] | None) -> int | None:
        """How many dev predictions of ``bench``'s base model differ from those of ``original_record``, the stored
        ``original`` prune-only record of its (task, seed); None when there is none (or it holds no predictions).
        Computed once per ``bench`` (:attr:`SeedBench.base_differs`).

        A resumed run loads the cached base model, or fine-tunes it again where ``DIR/base/`` is gone (a clean clone,
        another machine), while the folder's records evaluated the first one. Records hold no weights: predicting
        the whole dev set as that record says is the check a run can make. The fine-tune is seeded, so on the same
        thread count it gives the same model again (0 differ). One dev evaluation of the base model where the cell
        runs (its device, precision and threads, as the original cell's; another device or thread count may flip a
        prediction within rounding of a tie), counted in no cell's cost. A check that raises is logged and counts
        as None: it must not lose the cell's record.
        """
        if original_record is None or not original_record.get("predictions"):
            return None
        if not bench.base_checked:
            bench.base_checked = True
            stored = [int(p) for p in read_ids(original_record["predictions"])]  # (a list, or compact from schema 4)
            try:
                now = [int(p) for p in cell.evaluate_on_dev(bench, bench.base, None, Counter()).predictions]
            except Exception as exc:  # noqa: BLE001 - an advisory check; the record it would mark is computed
                log.warning("%s seed %d: the base model could not be checked against the stored original record "
                            "(%s: %s)", bench.data.spec.name, bench.seed, type(exc).__name__, exc)
                return None
            bench.base_differs = sum(a != b for a, b in zip(now, stored)) + abs(len(now) - len(stored))
        return bench.base_differs

    def seed_bench(self, data: TaskData, seed: int, base: torch.nn.Module, tokenizer) -> SeedBench:
        """The :class:`benchmark.cells.bench.SeedBench` of (``data``'s task, ``seed``) around the base model."""
        mini_train_idx, mini_dev_idx = train_splits(len(data.train), seed, self.cfg.preset.mini_dev_fraction)
        return SeedBench(data=data, seed=seed, base=base,
                         splits={"mini_train": data.train.select(mini_train_idx),
                                 "mini_dev": data.train.select(mini_dev_idx), "train": data.train},
                         tokenizer=tokenizer, device=self.device, model_name=self.cfg.model,
                         recover=self.cfg.preset.recover, progress=self.cfg.progress, precision=self.cfg.precision,
                         min_heads_per_layer=self.cfg.min_heads_per_layer)

    # ------------------------------------------------------------------ one cell

    def run_cell(self, bench: SeedBench, method: str, condition: str, setter_record: dict[str, Any] | None,
                 reuse: PruneState | None = None, stored_prune: dict[str, Any] | None = None,
                 level: str | None = None, scores: Any = None) -> tuple[Record, PruneState | None]:
        """One cell: prune step, condition step, dev evaluation; returns the record (its ``cell`` key and
        ``base_failed`` are left to the caller) and the prune step (None for the unpruned model) for reuse.

        Args:
            setter_record: the budget setter's prune-only record of this (task, seed) as stored (``matched:``
                budgets only; None: it has none).
            reuse: the prune step of this method's prune-only cell of the same (task, seed), or None to prune.
            stored_prune: that prune-only cell's stored record, when this run did not compute it (a resumed run):
                a ``prune+recover`` cell then recovers its mask (:meth:`PruneState.of_record`); an
                ``own-fine-tuning`` cell prunes again (it needs the weights) and warns if its mask differs.
            level: the cell's budget level (a label of ``cfg.level_labels``; None: the first).
            scores: a score pass of this method at another level of this (task, seed) (:meth:`score_pass`
                takes it), from which a prune-only cell derives its mask instead of pruning; None: it prunes.

        Raises:
            ConfigError: the method needs a head budget and none applies.
            RuntimeError: ``matched:METHOD`` and ``setter_record`` is None.
        """
        counter = Counter()
        started, t0 = now_utc(), time.time()
        reuse = prune_input(condition, reuse, stored_prune)
        pruned, state, model, mask = self.cell_model(bench, method, condition, counter, setter_record, reuse, level,
                                                     self.score_pass(method, scores))
        dev = cell.evaluate_on_dev(bench, model, mask, counter)
        cost = Cost(wall_s=round(time.time() - t0, 3), prune_wall_s=round(pruned.prune_s, 3), device=str(self.device),
                    machine=machine_name(self.device), threads=torch.get_num_threads(), **counter.as_dict())
        record = cell.assemble_record(bench, method, condition, pruned, dev, cost, self.provenance, started, now_utc())
        if condition == OWN and stored_prune is not None and record.mask != stored_prune.get("mask"):
            message = (f"{method} on {bench.data.spec.name} seed {bench.seed}: pruned again for its own weights, it "
                       f"chose another mask than its stored prune-only cell (another thread count or device?)")
            warnings.warn(message, stacklevel=2)
            record.trace = {**record.trace, "mask_differs_from_prune_only": True}
        return record, state

    def cell_model(self, bench: SeedBench, method: str, condition: str, counter: Counter,
                   setter_record: dict[str, Any] | None, reuse: PruneState | None, level: str | None = None,
                   scores: ScorePass | None = None
                   ) -> tuple[cell.Pruned, PruneState | None, torch.nn.Module, torch.Tensor | None]:
        """The model a cell evaluates: its prune step (``reuse``'d when given), then the condition's step
        (recovery, the control's fine-tune, or the method's own weights).

        Returns:
            ``(pruned, prune state or None, the model, the [L, H] head mask its dev evaluation applies or None)``.

        Raises:
            ConfigError / RuntimeError: as :meth:`run_cell`.
        """
        pruned, state = self._prune_step(bench, method, counter, setter_record, reuse, level, scores)
        if is_repair_condition(condition):
            model, pruned = repair_step(bench, pruned, condition, counter)
            return pruned, state, model, pruned.mask
        model = cell.condition_step(bench, pruned, condition, counter)
        return pruned, state, model, cell.dev_mask(method, condition, pruned)

    def score_pass(self, method: str, source: Any) -> ScorePass | None:
        """The score pass of ``source``: a :class:`ScorePass`, a :class:`PruneState` holding one, or a stored
        prune-only record of ``method`` at another level (:func:`~headprune_bench.benchmark.cells.levels.stored_pass`
        checks it); None when there is none or ``method`` does not rank once."""
        if source is None or method == ORIGINAL or not self.create(method).ranks_once():
            return None
        if isinstance(source, PruneState):
            return source.score_pass
        if isinstance(source, dict):
            return stored_pass(source, self.create(method), self.cfg.min_heads_per_layer)
        return source

    def _prune_step(self, bench: SeedBench, method: str, counter: Counter, setter_record: dict[str, Any] | None,
                    reuse: PruneState | None, level: str | None = None,
                    scores: ScorePass | None = None) -> tuple[cell.Pruned, PruneState | None]:
        """Prune a copy of the base model with ``method`` under the cell's budget, or take ``reuse`` (its cost is
        counted again), or derive the mask from ``scores`` (their cost is counted in the cell that scored)."""
        if method == ORIGINAL:
            return cell.unpruned(bench), None
        pruner = self.create(method)
        options = pruner.get_options()
        floor = self.cfg.min_heads_per_layer
        budget, per_layer = self._cell_budget(pruner, method, bench, setter_record, level)
        fixed = budget.target is not None and per_layer is None and pruner.ranks_once()
        if reuse is not None:  # the prune-only cell of this method: same mask, no recompute
            state = reuse
            counter.forward += state.cost["forward_examples"]
            counter.backward += state.cost["backward_examples"]
        elif scores is not None and fixed:
            result, seconds = scores.derive(pruner, int(budget.target), floor)
            state = PruneState(result, seconds, {"forward_examples": 0, "backward_examples": 0}, score_pass=scores)
        else:
            ctx = bench.context(counter, budget.target, per_layer)
            work = training.clone_model(bench.base)
            t_prune = time.time()
            own = pruner.prune(work, ctx)
            result = with_floor(own, floor)
            state = PruneState(result, time.time() - t_prune, counter.as_dict())
            if fixed and not own.retrained and own.scores is not None:
                key = self.key(bench.data.spec.name, bench.seed, method, PRUNE_ONLY, level)
                state.score_pass = ScorePass(own, key, state.prune_s, dict(state.cost))
        return cell.pruned_by(bench, method, state.result, options, budget, state.prune_s), state

    def _cell_budget(self, pruner: HeadPruner, method: str, bench: SeedBench,
                     setter_record: dict[str, Any] | None,
                     level: str | None = None) -> tuple[BudgetInfo, list[int] | None]:
        """The budget of a cell of ``method`` at ``level`` (``achieved`` still 0: set from the mask) and the
        per-layer target counts (``[L]``, with ``--match-per-layer``; else None).

        Raises:
            ConfigError: the method needs a head budget and none applies.
        """
        spec = self.budget_spec(method, level)
        if method == self.setter():
            matched = self.cfg.level_label(self.cfg.matched)
            return BudgetInfo(spec, None, 0, f"decides its own count; sets the budget {matched}"), None
        if pruner.own_budget:
            target, per_layer, note = None, None, "decides its own count"
        else:
            target, per_layer, note = self.target(bench.data.spec, bench.seed, bench.total_heads, setter_record,
                                                  spec)
        if target is None and pruner.needs_target:
            raise ConfigError(f"method '{method}' needs a head budget")
        return BudgetInfo(spec, target, 0, note), per_layer

    def target(self, spec: tasks.TaskSpec, seed: int, total_heads: int, setter_record: dict[str, Any] | None,
               level: str | None = None) -> tuple[int | None, list[int] | None, str]:
        """(target head count, per-layer counts or None, note) of a budget level (a label of ``cfg.level_labels``;
        None: the first) on a (task, seed): the count of ``heads:K`` / ``fraction:F``, or the count the setter of
        ``matched:METHOD`` pruned there.

        Raises:
            RuntimeError: ``matched:METHOD`` and ``setter_record`` is None (the setter's cell failed).
        """
        labels = self.cfg.level_labels
        budget = self.cfg.budgets[labels.index(level) if level in labels else 0]
        if budget.kind != "matched":
            return budget.target(total_heads), None, budget.label
        if setter_record is None:
            raise RuntimeError(f"budget {budget.label}: the {budget.value} cell of {spec.name} seed {seed} has no "
                               f"record (it failed or has not run); cannot match its head count")
        setter = Record.from_dict(setter_record)  # read as the report reads it (defaults for old schemas)
        achieved = setter.budget.achieved
        per_layer = [int(sum(1 for v in row if v == 0)) for row in setter.mask] if self.cfg.match_per_layer else None
        return achieved, per_layer, f"{budget.label} ({budget.value} pruned {achieved})"

    def base_failed(self, bench: SeedBench, original_record: dict[str, Any] | None) -> bool:
        """Whether the unpruned base model of ``bench``'s (task, seed) is degenerate: its ``original`` record's flag,
        or, when that cell has no record (it failed), the base model's own dev evaluation (computed once per
        bench), never the pruned cell's own flag."""
        if original_record is not None:
            return Record.from_dict(original_record).degenerate  # read as the report reads it
        if bench.base_failed is None:
            bench.base_failed = bool(cell.evaluate_on_dev(bench, bench.base, None, Counter()).reasons)
        return bench.base_failed

    def finish(self, record: Record, key: str, bench: SeedBench, original_record: dict[str, Any] | None,
               stored_original: bool = False) -> Record:
        """``record`` with its planned ``key``, ``base_failed`` (see :meth:`base_failed`) and ``base_check``: when
        ``original_record`` was stored by an earlier run (``stored_original``: a resumed (task, seed), whose base
        model was loaded from ``DIR/base/`` or fine-tuned again), :meth:`base_check` compares the base model with it
        (``equal``, or ``differs:N`` and :data:`benchmark.store.records.BASE_DIFFERS` in the trace; ``check failed``
        when it raised); ``not compared`` when there is no such record (the base model and the ``original`` cell are
        this run's) or it holds no predictions. ``base_failed`` stays the stored record's: one flag per (task,
        seed), whatever its cells started from."""
        record.base_failed = self.base_failed(bench, original_record)
        record.cell = key
        if not stored_original or original_record is None or not original_record.get("predictions"):
            record.base_check = BASE_NOT_COMPARED
            return record
        differ = self.base_check(bench, original_record)
        record.base_check = BASE_CHECK_FAILED if differ is None else base_differs_text(differ)
        if differ:
            record.trace = {**record.trace, BASE_DIFFERS: int(differ)}
        return record
