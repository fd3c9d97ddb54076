"""The benchmark runner: for each (task, seed) fine-tune (or reuse) the base model, then for each method build
the pruning context, prune, evaluate on the GLUE dev split and append one record per cell.

Protocol: shared/reference/protocol.md. A *cell* is (task, seed, method, budget, condition); the base model of a
(task, seed) is fine-tuned once on the (capped) train split, cached in ``DIR/base/`` and shared by every method,
so comparisons are paired by seed. Methods see only the train-derived splits ``mini_train`` / ``mini_dev`` (a
seeded ``mini_dev_fraction`` slice of the train split); the dev split is read only to report.

Conditions (protocol §4): ``prune-only`` always; with ``recover=True`` also ``prune+recover`` (the masked model
re-fine-tuned on mini-train with the same budget for every method, early stopping on mini-dev, mask fixed) and the
``control`` (method ``original``: the unpruned base model given the same extra fine-tuning).

The path of one record: :meth:`Runner.run` plans the cells and, per task, :func:`~benchmark.cell.prepare_task`;
:meth:`Runner._run_seed` gets the base model (:meth:`Runner._base_model`) and runs each cell to do with
:meth:`Runner._run_cell`: the prune step (:meth:`Runner._prune_step`, the budget from :meth:`Runner._cell_budget`),
the condition step (:func:`~benchmark.cell.condition_step`), the dev evaluation
(:func:`~benchmark.cell.evaluate_on_dev`) and :func:`~benchmark.cell.assemble_record`; ``_run_seed`` then sets
the record's key and ``base_failed`` and :meth:`RecordStore.add <benchmark.store.RecordStore.add>` appends
``record.to_dict()`` to ``records.jsonl``.

Module layout: :mod:`benchmark.run_config` (options), :mod:`benchmark.run_folder` (``run.json``, base models),
:mod:`benchmark.provenance`, :mod:`benchmark.cell` (the steps of one cell), this module (the cell loop).
"""
from __future__ import annotations

import dataclasses
import logging
import subprocess  # noqa: F401 - tests patch benchmark.runner.subprocess.run (used by provenance._git_commit)
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import methods
from benchmark import cell, models, tasks, training
from benchmark.cell import DEGENERATE_CLASS_SHARE, SeedBench, TaskData, prepare_task, train_splits  # noqa: F401
from benchmark.config import ConfigError, Experiment
from benchmark.provenance import _git_commit, _versions, data_hashes, now_utc, quiet_libraries  # noqa: F401
from benchmark.records import (CONTROL, NO_BUDGET, ORIGINAL, OWN_BUDGET, PRUNE_ONLY, RECOVER,  # noqa: F401
                               BudgetInfo, CellKey, Cost, Record)
from benchmark.run_config import MAX_SEED, RunConfig, make_run_config  # noqa: F401
from benchmark.run_folder import RunFolderError, check_run_json, save_base_model
from benchmark.store import REJECTED, RecordStore, file_lock
from benchmark.training import Counter

log = logging.getLogger("benchmark")


class Runner:
    """Runs (or resumes) a benchmark into ``config.out``. Use :meth:`run`, then :meth:`close`.

    Everything that can be checked without training is checked on construction: the tasks' data files, the
    method names and options, the budget against the model's head count, the folder's ``run.json``.

    Raises:
        ConfigError: a bad option, or a folder made with another configuration (see
            :func:`~benchmark.run_folder.check_run_json`).
        benchmark.tasks.DataError: a task's data is missing or malformed.
        OSError: the model or the folder cannot be read or written.
    """

    def __init__(self, config: RunConfig) -> None:
        self.cfg = config
        self.out = Path(config.out)
        self.device = models.resolve_device(config.device)
        self.task_specs = [tasks.get_task(t) for t in config.tasks]
        self.data_dir = tasks.resolve_data_dir(config.data_dir)
        # Read every task's files now: a missing or malformed file fails the run before any training.
        self.raw = {spec.name: tasks.load_task(spec, self.data_dir) for spec in self.task_specs}
        self.method_names = self._method_order()
        model_config = models.check_architecture(config.model)
        total_heads = model_config.num_hidden_layers * model_config.num_attention_heads
        fixed = config.budget.target(total_heads) if config.budget.kind != "matched" else None  # heads:K too large
        for name in self.method_names:  # fails now, not after training: checks that need the model and budget
            pruner = methods.create(name, **config.method_options.get(name, {}))
            pruner.check_setup(model_config.num_hidden_layers, model_config.num_attention_heads,
                               None if pruner.own_budget or not pruner.needs_target else fixed, model_config)
        quiet_libraries()
        self.out.mkdir(parents=True, exist_ok=True)  # only now: a refused configuration leaves no empty folder
        self._setup_logging()
        self.experiment = Experiment(
            model=config.model,
            model_revision=models.model_revision(config.model),
            data_source=str(self.data_dir.resolve()) if self.data_dir else f"hub:{tasks.HUB_DATASET}",
            data_hashes=data_hashes(self.task_specs, self.data_dir),
            train=dataclasses.asdict(config.preset.train),
            recover=dataclasses.asdict(config.preset.recover),
            max_length=config.preset.max_length,
            max_train_examples=config.preset.max_train_examples,
            max_dev_examples=config.preset.max_dev_examples,
            mini_dev_fraction=config.preset.mini_dev_fraction,
            device_type=self.device.type,
            # only a non-default precision enters the experiment, so folders made before --precision keep their hash
            extra={"precision": config.precision} if config.precision != "fp32" else {},
        )
        per_layer = config.match_per_layer and config.budget.kind == "matched"
        self.budget_label = config.budget.label + ("/per-layer" if per_layer else "")
        self.config_hash = check_run_json(self.out, self.experiment)
        self.store = RecordStore(self.out)
        for broken in self.store.rejected:
            tqdm.write(f"warning: {broken}: moved to {self.out / REJECTED} (kept there); its cell, if it was a "
                       f"record, is computed again", file=sys.stderr)
        self.provenance = {"git_commit": _git_commit(self.out), "versions": _versions(), "model": config.model,
                           "model_revision": self.experiment.model_revision,
                           "data_hashes": self.experiment.data_hashes, "config_hash": self.config_hash}
        self.failures: list[dict[str, Any]] = []
        # the last PruningResult, reused by the prune+recover cell of the same (task, seed, method)
        self._pruned: dict[tuple[str, int, str], tuple[Any, float, dict[str, int]]] = {}

    # ------------------------------------------------------------------ setup helpers

    def _method_order(self) -> list[str]:
        """The run's methods, each once, the budget setter of ``matched:METHOD`` first; every method's options
        are checked by creating it.

        Raises:
            ConfigError: the budget setter itself needs a head count, or is not among the methods.
            methods.UnknownMethodError / ValueError: an unknown method or option.
        """
        names = list(dict.fromkeys(self.cfg.methods))
        for name in names:  # fail fast on unknown names / options
            self._create(name)
        if self.cfg.budget.kind == "matched":
            setter = self.cfg.budget.value
            if methods.get_method_class(setter).needs_target:
                raise ConfigError(
                    f"--budget matched:{setter}: {setter} itself needs a head count; the budget setter must be a "
                    f"method that decides how many heads to prune (e.g. auber)"
                )
            if setter not in names:
                raise ConfigError(f"--budget matched:{setter}: add {setter} to --methods (it sets the budget)")
            names.remove(setter)
            names.insert(0, setter)
        return names

    def _setup_logging(self) -> None:
        """Log to ``DIR/run.log`` (removed again by :meth:`close`)."""
        handler = logging.FileHandler(self.out / "run.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        self._handler = handler

    # ------------------------------------------------------------------ cells

    def cell_key(self, task: str, seed: int, method: str, condition: str, options: dict[str, Any] | None) -> str:
        """The key a cell is stored under (:class:`~benchmark.records.CellKey`), with this run's budget spec of
        ``method`` and the hash of its ``options``."""
        return str(CellKey.of(task, seed, method, self._budget_spec(method), condition, options))

    def _budget_spec(self, method: str) -> str:
        """The budget a cell of ``method`` is keyed and recorded with: ``none`` for the unpruned model, ``own`` for
        a method that decides its own count (``HeadPruner.own_budget``, e.g. AUBER), else the run's budget."""
        if method == ORIGINAL:
            return NO_BUDGET
        if methods.get_method_class(method).own_budget:
            return OWN_BUDGET
        return self.budget_label

    def planned_cells(self) -> list[tuple[str, int, str, str]]:
        """(task, seed, method, condition) of every cell of this run, in execution order."""
        conditions = [PRUNE_ONLY] + ([RECOVER] if self.cfg.recover else [])
        cells = []
        for spec in self.task_specs:
            for seed in self.cfg.seeds:
                cells.append((spec.name, seed, ORIGINAL, PRUNE_ONLY))
                if self.cfg.recover:
                    cells.append((spec.name, seed, ORIGINAL, CONTROL))
                for name in self.method_names:
                    for cond in conditions:
                        cells.append((spec.name, seed, name, cond))
        return cells

    def _key(self, task: str, seed: int, method: str, condition: str) -> str:
        """:meth:`cell_key` of a planned cell, with the options ``method`` runs with in this run."""
        opts = None if method == ORIGINAL else self._create(method).get_options()
        return self.cell_key(task, seed, method, condition, opts)

    def _create(self, method: str):
        """A fresh pruner of ``method`` with this run's options for it."""
        return methods.create(method, **self.cfg.method_options.get(method, {}))

    # ------------------------------------------------------------------ main loop

    def run(self) -> list[dict[str, Any]]:
        """Compute every missing cell; returns the records of this run's cells (finished ones included), as the
        JSON objects of ``records.jsonl``.

        Failed cells are written to ``failures.jsonl`` and listed in ``self.failures``; the other cells go on.
        """
        planned = self.planned_cells()
        keys = [self._key(*c) for c in planned]
        todo = {k for k in keys if k not in self.store}
        self.store.add_plan({"started": now_utc(), "argv": sys.argv[1:], "git_commit": self.provenance["git_commit"],
                             "tasks": list(self.cfg.tasks), "seeds": list(self.cfg.seeds),
                             "methods": self.method_names, "budget": self.budget_label, "recover": self.cfg.recover,
                             "cells": keys, "to_do": len(todo)})
        log.info("run %s: %d cells planned, %d to do (device %s)", self.out, len(keys), len(todo), self.device)
        bar = tqdm(total=len(keys), initial=len(keys) - len(todo), desc="cells", disable=not self.cfg.progress)
        self.tokenizer = None
        try:
            for spec in self.task_specs:
                seeds_todo = [s for s in self.cfg.seeds
                              if any(self._key(*c) in todo for c in planned if c[0] == spec.name and c[1] == s)]
                if not seeds_todo:
                    continue
                if self.tokenizer is None:
                    self.tokenizer = models.load_tokenizer(self.cfg.model)
                data = prepare_task(spec, self.raw[spec.name], self.tokenizer, self.cfg.preset,
                                    self.experiment.subsample_seed)
                for seed in seeds_todo:
                    cells = [c for c in planned if c[0] == spec.name and c[1] == seed]
                    self._run_seed(data, seed, cells, todo, bar)
        finally:
            bar.close()
        return [self.store.get(k) for k in keys if self.store.get(k) is not None]

    def _run_seed(self, data: TaskData, seed: int, cells, todo: set[str], bar) -> None:
        """Run the cells of one (task, seed) that are in ``todo``; store each record, or its failure."""
        spec = data.spec
        mini_train_idx, mini_dev_idx = train_splits(len(data.train), seed, self.cfg.preset.mini_dev_fraction)
        bench = SeedBench(data=data, seed=seed, base=self._base_model(data, seed),
                          splits={"mini_train": data.train.select(mini_train_idx),
                                  "mini_dev": data.train.select(mini_dev_idx), "train": data.train},
                          tokenizer=self.tokenizer, device=self.device, model_name=self.cfg.model,
                          recover=self.cfg.preset.recover, progress=self.cfg.progress,
                          precision=self.cfg.precision)
        original_key = self._key(spec.name, seed, ORIGINAL, PRUNE_ONLY)
        for task_name, _, method, condition in cells:
            key = self._key(task_name, seed, method, condition)
            if key not in todo:
                continue
            bar.set_description(f"{spec.name} s{seed} {method} {condition}")
            try:
                record = self._run_cell(bench, method, condition)
            except Exception as exc:  # noqa: BLE001 - a failed cell must not lose the others
                self._fail(key, spec.name, seed, method, condition, exc)
            else:
                record.base_failed = self._base_failed(bench, original_key)
                record.cell = key
                self.store.add(record)
                todo.discard(key)
            bar.update(1)

    def _base_failed(self, bench: SeedBench, original_key: str) -> bool:
        """Whether the unpruned base model of ``bench``'s (task, seed) is degenerate: its ``original`` record's flag,
        or, when that cell has no record (it failed), the base model's own dev evaluation (computed once), never
        the pruned cell's own flag."""
        original = self.store.get(original_key)
        if original is not None:
            return Record.from_dict(original).degenerate  # read as the report reads it (defaults for old schemas)
        if bench.base_failed is None:
            bench.base_failed = bool(cell.evaluate_on_dev(bench, bench.base, None, Counter()).reasons)
        return bench.base_failed

    def _fail(self, key: str, task: str, seed: int, method: str, condition: str, exc: Exception) -> None:
        """Record a failed cell in ``failures.jsonl`` and ``self.failures``, log it and say it (it is retried by
        the next run)."""
        failure = {"cell": key, "task": task, "seed": seed, "method": method, "condition": condition,
                   "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(), "time": now_utc()}
        self.store.add_failure(failure)
        self.failures.append(failure)
        log.error("cell %s failed: %s", key, failure["error"])
        tqdm.write(f"FAILED {key}: {failure['error']}")

    # ------------------------------------------------------------------ base model

    def _base_model(self, data: TaskData, seed: int):
        """Fine-tune the pre-trained model on the (capped) train split with ``seed``, or load it from
        ``DIR/base/<task>-seed<seed>`` when a previous run finished it. Saved atomically (tmp dir + rename).

        Raises:
            RunFolderError: the fine-tuned model cannot be saved.
        """
        folder = self.out / "base" / f"{data.spec.name}-seed{seed}"
        # one lock per (task, seed): processes sharing the folder that need the same base model train it once;
        # the others wait, then load it
        with open(self.out / f".base-{data.spec.name}-seed{seed}.lock", "a+b") as lock, file_lock(lock.fileno()):
            if (folder / "config.json").exists():
                return self._load_base(folder)
            return self._train_base(data, seed, folder)

    def _load_base(self, folder: Path):
        """The cached base model in ``folder``, in fp32 on the run's device.

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

    def _train_base(self, data: TaskData, seed: int, folder: Path):
        """Fine-tune the base model of (task, ``seed``) and save it to ``folder`` (see :meth:`_base_model`)."""
        torch.manual_seed(seed)  # the classification head's initialisation
        model = models.load_classifier(self.cfg.model, data.spec.num_labels).to(self.device)
        start = time.time()
        training.fine_tune(model, data.train, self.tokenizer, self.device, self.cfg.preset.train, seed=seed,
                           desc=f"base {data.spec.name} s{seed}", progress=self.cfg.progress,
                           precision=self.cfg.precision)
        save_base_model(model, self.tokenizer, folder, {"wall_s": time.time() - start, "examples": len(data.train),
                                                        "seed": seed, "finished": now_utc()})
        log.info("base model %s trained in %.0f s", folder, time.time() - start)
        return model.eval()

    # ------------------------------------------------------------------ one cell

    def _run_cell(self, bench: SeedBench, method: str, condition: str) -> Record:
        """One cell: prune step, condition step, dev evaluation, the record (its key and ``base_failed`` are set by
        :meth:`_run_seed`)."""
        counter = Counter()
        started, t0 = now_utc(), time.time()
        pruned = self._prune_step(bench, method, counter)
        model = cell.condition_step(bench, pruned, condition, counter)
        dev = cell.evaluate_on_dev(bench, model, cell.dev_mask(method, condition, pruned), counter)
        cost = Cost(wall_s=round(time.time() - t0, 3), prune_wall_s=round(pruned.prune_s, 3), device=str(self.device),
                    **counter.as_dict())
        return cell.assemble_record(bench, method, condition, pruned, dev, cost, self.provenance, started, now_utc())

    def _prune_step(self, bench: SeedBench, method: str, counter: Counter) -> cell.Pruned:
        """Prune a copy of the base model with ``method`` under the cell's budget, or reuse the result of the
        method's prune-only cell of the same (task, seed) that just ran (its cost is counted again).

        Raises:
            ConfigError: the method needs a head budget and none applies.
            RuntimeError: ``matched:METHOD`` and the setter's cell has no record.
        """
        if method == ORIGINAL:
            return cell.unpruned(bench)
        pruner = self._create(method)
        options = pruner.get_options()
        budget, per_layer = self._cell_budget(pruner, method, bench)
        cache_key = (bench.data.spec.name, bench.seed, method)
        if cache_key in self._pruned:  # the prune-only cell of this method just ran: same mask, no recompute
            result, prune_s, prune_cost = self._pruned[cache_key]
            counter.forward += prune_cost["forward_examples"]
            counter.backward += prune_cost["backward_examples"]
        else:
            ctx = bench.context(counter, budget.target, per_layer)
            work = training.clone_model(bench.base)
            t_prune = time.time()
            result = pruner.prune(work, ctx)
            prune_s = time.time() - t_prune
            self._pruned = {cache_key: (result, prune_s, counter.as_dict())}  # keep one: models are large
        return cell.pruned_by(bench, method, result, options, budget, prune_s)

    def _cell_budget(self, pruner, method: str, bench: SeedBench) -> tuple[BudgetInfo, list[int] | None]:
        """The budget of a cell of ``method`` (``achieved`` still 0: set from the mask) and the per-layer target
        counts (``[L]``, with ``--match-per-layer``; else None).

        Raises:
            ConfigError: the method needs a head budget and none applies.
        """
        spec = self._budget_spec(method)
        if self.cfg.budget.kind == "matched" and method == self.cfg.budget.value:
            return BudgetInfo(spec, None, 0, f"decides its own count; sets the budget {self.budget_label}"), None
        if pruner.own_budget:
            target, per_layer, note = None, None, "decides its own count"
        else:
            target, per_layer, note = self._target(bench.data.spec, bench.seed, bench.total_heads)
        if target is None and pruner.needs_target:
            raise ConfigError(f"method '{method}' needs a head budget")
        return BudgetInfo(spec, target, 0, note), per_layer

    def _target(self, spec: tasks.TaskSpec, seed: int, total_heads: int) -> tuple[int | None, list[int] | None, str]:
        """(target head count, per-layer counts or None, note) of the run's budget on a (task, seed): the count of
        ``heads:K`` / ``fraction:F``, or the count the setter of ``matched:METHOD`` pruned there.

        Raises:
            RuntimeError: ``matched:METHOD`` and the setter's cell has no record (it failed or has not run).
        """
        budget = self.cfg.budget
        if budget.kind != "matched":
            return budget.target(total_heads), None, budget.label
        setter = budget.value
        rec = self.store.get(self._key(spec.name, seed, setter, PRUNE_ONLY))
        if rec is None:
            raise RuntimeError(f"budget {budget.label}: the {setter} cell of {spec.name} seed {seed} has no record "
                               f"(it failed or has not run); cannot match its head count")
        setter_rec = Record.from_dict(rec)  # read as the report reads it (defaults for old schemas)
        achieved = setter_rec.budget.achieved
        per_layer = [int(sum(1 for v in row if v == 0)) for row in setter_rec.mask] if self.cfg.match_per_layer else None
        return achieved, per_layer, f"{budget.label} ({setter} pruned {achieved})"

    def close(self) -> None:
        """Stop logging to ``DIR/run.log``."""
        log.removeHandler(self._handler)
        self._handler.close()
