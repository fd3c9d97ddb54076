"""The benchmark runner: plan a run's cells, fine-tune (or reuse) each (task, seed)'s base model, run every cell
to do (serially, or on Ray through :mod:`headprune_bench.benchmark.execution.ray.driver`) and append one record
per cell. Conditions and splits: docs/protocol.md; the path of one record: docs/design.md.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from headprune_bench import methods
from headprune_bench.benchmark import models, tasks, training
from headprune_bench.benchmark.cells.bench import SeedBench, TaskData, prepare_task
from headprune_bench.benchmark.cells.levels import ScorePass
from headprune_bench.benchmark.cells.work import (
    CellWork,
    PruneState,
    check_floor,
    warn_other_base,
    will_prune,
)
from headprune_bench.benchmark.config.presets import ConfigError, Experiment, check_levels
from headprune_bench.benchmark.config.run import RunConfig, make_run_config  # noqa: F401 - re-exported for callers
from headprune_bench.benchmark.execution.eta import Eta
from headprune_bench.benchmark.execution.resolve import bf16_warning, resolve_execution
from headprune_bench.benchmark.execution.stopping import Running, StopRequest, starts_after_stop, stop_between_cells
from headprune_bench.benchmark.execution.time_limit import MachineTimes, TimeLimit
from headprune_bench.benchmark.provenance import data_hashes, git_state, library_versions, now_utc, quiet_libraries
from headprune_bench.benchmark.run.plan import make_eta, repair_skips, repairable
from headprune_bench.benchmark.store.claims import Claims
from headprune_bench.benchmark.store.folder import BASE_DIR, check_run_json, save_base_model
from headprune_bench.benchmark.store.jsonl import REJECTED, RecordStore, file_lock
from headprune_bench.benchmark.store.records import (
    CONTROL,
    ORIGINAL,
    OWN,
    PRUNE_ONLY,
    RECOVER,
    CellKey,
    Record,
    repair_condition,
    reuses_prune,
)

log = logging.getLogger("benchmark")


def plan_change(same_command: list[dict[str, Any]], methods_now: list[str], planned: list[CellKey]) -> str | None:
    """What this run's methods add to or drop from the last plan of the same command (``same_command``: the
    folder's ``runs.jsonl`` entries with this run's argv), e.g. ``--methods all`` after a plugin was installed; None
    when nothing changed or the command is new to the folder."""
    if not same_command:
        return None
    last = same_command[-1]
    before = list(last.get("methods") or [])
    added = [m for m in methods_now if m not in before]
    dropped = [m for m in before if m not in methods_now]
    if not added and not dropped:
        return None
    parts = []
    if added:
        counts = ", ".join(f"{m} ({sum(c.method == m for c in planned)} cells)" for m in added)
        parts.append(f"adds the method(s) {counts}")
    if dropped:
        parts.append(f"drops {', '.join(dropped)}")
    return (f"the same command planned {len(last.get('cells') or [])} cells on {last.get('started', '?')}; this plan "
            f"{' and '.join(parts)} (`--methods all`, the default, takes every installed method, entry-point plugins "
            f"included)")


class Runner:
    """Runs (or resumes) a benchmark into ``config.out``. Use :meth:`run`, then :meth:`close`.

    Everything that can be checked without training is checked on construction: the tasks' data files, the
    method names and options, the budget against the model's head count, the folder's ``run.json``.

    Raises:
        ConfigError: a bad option, or a folder made with another configuration (see
            :func:`~headprune_bench.benchmark.store.folder.check_run_json`).
        headprune_bench.benchmark.tasks.DataError: a task's data is missing or malformed.
        OSError: the model or the folder cannot be read or written.
    """

    def __init__(self, config: RunConfig, dry_run: bool = False) -> None:
        self.cfg = config
        self.out = Path(config.out)
        self.execution = resolve_execution(config)  # serial, or on Ray; the device cells run on
        self.device = self.execution.device
        if (slow := bf16_warning(config.precision, self.device)) is not None:
            tqdm.write(f"warning: {slow}", file=sys.stderr)
        self.task_specs = [tasks.get_task(t) for t in config.tasks]
        self.data_dir = tasks.resolve_data_dir(config.data_dir)
        # Read every task's files now: a missing or malformed file fails the run before any training.
        self.raw = {spec.name: tasks.load_task(spec, self.data_dir) for spec in self.task_specs}
        self.method_names = self._method_order()
        model_config = models.check_architecture(config.model)
        total_heads = model_config.num_hidden_layers * model_config.num_attention_heads
        check_levels(config.budgets, total_heads)  # heads:K too large, two levels of one count
        fixed = [b.target(total_heads) for b in config.budgets if b.kind != "matched"] or [None]
        check_floor(config.min_heads_per_layer, model_config.num_hidden_layers, model_config.num_attention_heads,
                    max(fixed, key=lambda t: -1 if t is None else t))
        for name in self.method_names:  # fails now, not after training: checks that need the model and budget
            pruner = methods.create(name, **config.method_options.get(name, {}))
            for target in fixed:
                pruner.check_setup(model_config.num_hidden_layers, model_config.num_attention_heads,
                                   None if pruner.own_budget or not pruner.needs_target else target, model_config)
        quiet_libraries()
        self._handler = None
        if not dry_run:  # (--dry-run reads the folder, if any, and writes nothing)
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
        self.budget_label = ",".join(config.level_labels)
        self.config_hash = check_run_json(self.out, self.experiment, write=not dry_run)
        self.store = RecordStore(self.out, read_only=dry_run)
        self.claims = Claims(self.out)  # the cells this process computes now (two runs into one folder share)
        self.left_to_others: set[str] = set()  # cells another run was computing when this one came to them (Ray)
        for broken in self.store.rejected:
            tqdm.write(f"warning: {broken}: moved to {self.out / REJECTED} (kept there); its cell, if it was a "
                       f"record, is computed again", file=sys.stderr)
        # the checkout as the run starts (git_commit, git_dirty, git_diff; docs/output-files.md), run folder left out
        self.provenance = {**git_state(self.out).as_provenance(), "versions": library_versions(),
                           "model": config.model, "model_revision": self.experiment.model_revision,
                           "data_hashes": self.experiment.data_hashes, "config_hash": self.config_hash,
                           "precision": config.precision}
        self.work = CellWork(cfg=config, provenance=self.provenance,
                             method_classes={m: methods.get_method_class(m) for m in self.method_names},
                             device=self.device)
        self.failures: list[dict[str, Any]] = []
        self.warned_bases: set[tuple[str, int]] = set()  # (task, seed)s warned about (cell_work.warn_other_base)
        self.stop = StopRequest()  # replaced by run()'s, which the first SIGINT sets
        self.not_run = 0
        self.limit: TimeLimit | None = None  # run()'s, with --time-limit
        self.times: MachineTimes | None = None  # run()'s estimates (the limit's, if any), for what a stop says
        self.eta: Eta | None = None  # run()'s expected time of the work left, for the progress line
        self.tokenizer = None  # loaded by the first task_data()
        # the last prune step, reused by the prune+recover cell of the same (task, seed, method, level)
        self._pruned: dict[tuple[str, int, str, str], PruneState] = {}
        # the score passes of the (task, seed) running, by method (a sweep's levels derive their masks from them)
        self._passes: dict[tuple[str, int, str], ScorePass] = {}

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
        if self.cfg.matched is not None:
            setter = self.cfg.matched.value
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

    def folder_times(self) -> MachineTimes:
        """The wall times of the folder's records and base fine-tunes, which estimate this run's cells by the
        machine that ran them (:class:`MachineTimes`; this run's: ``Execution.machine``)."""
        return MachineTimes.of_folder(self.store.records(), self.out / BASE_DIR, here=self.execution.machine())

    # ------------------------------------------------------------------ cells

    def planned_cells(self) -> list[CellKey]:
        """The key of every cell of this run, in execution order."""
        conditions = [PRUNE_ONLY] + ([RECOVER] if self.cfg.recover else [])
        cells, fixable = [], set(repairable(self.method_names, self._create))
        for spec in self.task_specs:
            for seed in self.cfg.seeds:
                cells.append(self.work.cell_key(spec.name, seed, ORIGINAL, PRUNE_ONLY))
                if self.cfg.recover:
                    cells.append(self.work.cell_key(spec.name, seed, ORIGINAL, CONTROL))
                for name in self.method_names:
                    own = [OWN] if self._create(name).changes_weights() else []
                    repaired = [repair_condition(r) for r in self.cfg.repairs] if name in fixable else []
                    for level in self.work.levels_of(name):
                        for cond in conditions + repaired + own:
                            cells.append(self.work.cell_key(spec.name, seed, name, cond, level))
        return cells

    def repair_skips(self) -> list[str]:
        """The lines saying which methods ``--repair`` skips (:func:`~benchmark.run.plan.repair_skips`)."""
        return repair_skips(self.method_names, self._create) if self.cfg.repairs else []

    def _key(self, task: str, seed: int, method: str, condition: str, level: str | None = None) -> str:
        """The key of a planned cell (:meth:`CellWork.key <headprune_bench.benchmark.cells.work.CellWork.key>`)."""
        return self.work.key(task, seed, method, condition, level)

    def _create(self, method: str):
        """A fresh pruner of ``method`` with this run's options for it."""
        return methods.create(method, **self.cfg.method_options.get(method, {}))

    # ------------------------------------------------------------------ main loop

    def run(self) -> list[dict[str, Any]]:
        """Compute every missing cell, one at a time here or on Ray (``--workers`` / ``--ray-address``, see
        the Ray driver); returns the records of this run's cells (finished ones included), as the JSON
        objects of ``records.jsonl``.

        Failed cells are written to ``failures.jsonl`` and listed in ``self.failures``; the other cells go on. The
        first SIGINT (Ctrl-C) stops the run between cells (``execution.stopping``): the running cells finish and
        are written, no other starts, and ``self.not_run`` counts the cells left to do (0 when the run finished).
        """
        planned = self.planned_cells()
        keys = [str(c) for c in planned]
        todo = {k for k in keys if k not in self.store}
        change = plan_change([p for p in self.store.plans() if p.get("argv") == sys.argv[1:]], self.method_names,
                             planned)
        if change:
            tqdm.write(f"bench run: {change}", file=sys.stderr)
            log.info("%s", change)
        self.store.add_plan({"started": now_utc(), "argv": sys.argv[1:], "git_commit": self.provenance["git_commit"],
                             "git_diff": self.provenance["git_diff"],
                             "tasks": list(self.cfg.tasks), "seeds": list(self.cfg.seeds),
                             "methods": self.method_names, "budget": self.budget_label, "recover": self.cfg.recover,
                             "repairs": list(self.cfg.repairs),
                             "execution": self.execution.describe(), "cells": keys, "to_do": len(todo)})
        log.info("run %s: %d cells planned, %d to do (device %s; %s)", self.out, len(keys), len(todo), self.device,
                 self.execution.summary())
        for line in self.repair_skips():
            tqdm.write(f"bench run: {line}", file=sys.stderr)
            log.info("%s", line)
        self.eta = make_eta(self, planned, todo)
        tqdm.write(f"bench run: {len(keys)} cells planned, {len(todo)} to do; expected time: {self.eta.text()}",
                   file=sys.stderr)
        if self.cfg.time_limit_s is not None:
            self.limit = TimeLimit.starting_now(self.cfg.time_limit_s, self.folder_times())
            log.info("--time-limit: cells start only if they should finish within %.0f s", self.cfg.time_limit_s)
        self.times = self.limit.times if self.limit is not None else self.folder_times()
        bar = tqdm(total=len(keys), initial=len(keys) - len(todo), desc="cells", disable=not self.cfg.progress,
                   bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")  # (its own ETA counts cells
        bar.set_postfix_str(self.eta.text())  # as equal: an AUBER cell is 700 evaluations long)
        try:
            with stop_between_cells(stops_bases=not self.cfg.wait_for_base) as self.stop:
                if self.execution.parallel:
                    from headprune_bench.benchmark.execution.ray.driver import run_on_ray

                    run_on_ray(self, planned, todo, bar)
                else:
                    self._run_serial(planned, todo, bar)
        finally:
            bar.close()
        left = self.left_to_others - {k for k in self.left_to_others if k in self.store}
        if left:
            tqdm.write(f"bench run: {len(left)} cell(s) left to another bench run that was computing them into this "
                       f"folder", file=sys.stderr)
        failed = {f["cell"] for f in self.failures}
        self.not_run = len(todo - failed) if self.stop.requested or self.limit is not None else 0
        if self.not_run:
            log.warning("%s: %d cell(s) not run; the same command resumes",
                        "stopped on request" if self.stop.requested else "time limit", self.not_run)
        return [self.store.get(k) for k in keys if self.store.get(k) is not None]

    def seeds_to_do(self, planned: list[CellKey], todo: set[str]) -> list[tuple[tasks.TaskSpec, list[int]]]:
        """Per task of the run (in order), the seeds that have a cell in ``todo``; tasks without one left out."""
        out = []
        for spec in self.task_specs:
            seeds = [s for s in self.cfg.seeds
                     if any(str(c) in todo for c in planned if c.task == spec.name and c.seed == s)]
            if seeds:
                out.append((spec, seeds))
        return out

    def task_data(self, spec: tasks.TaskSpec) -> TaskData:
        """The task's capped, tokenised splits (:func:`prepare_task`); loads the tokenizer once."""
        if self.tokenizer is None:
            self.tokenizer = models.load_tokenizer(self.cfg.model)
        return prepare_task(spec, self.raw[spec.name], self.tokenizer, self.cfg.preset, self.experiment.subsample_seed)

    def _run_serial(self, planned: list[CellKey], todo: set[str], bar) -> None:
        """Today's path: the cells one at a time in this process, (task, seed) by (task, seed)."""
        for spec, seeds in self.seeds_to_do(planned, todo):
            if self.stop.requested:
                return
            data = self.task_data(spec)
            for seed in seeds:
                if self.stop.requested:
                    return
                cells = [c for c in planned if c.task == spec.name and c.seed == seed]
                self._run_seed(data, seed, cells, todo, bar)

    def _run_seed(self, data: TaskData, seed: int, cells: list[CellKey], todo: set[str], bar) -> None:
        """Run the cells of one (task, seed) that are in ``todo``; store each record, or its failure."""
        spec = data.spec
        if self.limit is not None and not (self.base_folder(spec.name, seed) / "config.json").exists():
            refusal = self.limit.base_refusal(spec.name)
            if refusal is not None:  # its fine-tune would not finish in time: so would none of its cells
                log.info("base model of %s seed %d not trained: %s", spec.name, seed, refusal)
                return
        try:
            base = self._base_model(data, seed)
        except training.TrainingStopped as stopped:
            message = (f"base model of {spec.name} seed {seed}: stopped on request after step {stopped.steps} of "
                       f"{stopped.total_steps}, not saved (the next run fine-tunes it again)")
            tqdm.write(f"bench run: {message}", file=sys.stderr)
            log.warning("%s", message)
            return
        bench = self.work.seed_bench(data, seed, base, self.tokenizer)
        original_key = self._key(spec.name, seed, ORIGINAL, PRUNE_ONLY)
        resumed = self.store.get(original_key) is not None  # its cells check the base model against that record
        self._passes = {}
        deferred: list[CellKey] = []
        for cell in cells:
            key, method, condition, level = str(cell), cell.method, cell.condition, cell.budget
            if key not in todo:
                continue
            inputs = self._cell_inputs(bench, method, condition, level)
            holds_weights = starts_after_stop(condition, inputs[1])  # seconds now, else a prune step again later
            if self.stop.requested and not holds_weights:
                continue
            if self.limit is not None and not holds_weights:
                scored = self.work.score_pass(method, inputs[3]) is not None
                refusal = self.limit.cell_refusal(spec.name, method, condition,
                                                  will_prune(method, condition, *inputs[1:3], scored=scored))
                if refusal is not None:
                    log.info("cell %s not started: %s", key, refusal)
                    continue
            if not self.claims.take(key):  # another `bench run` into this folder computes it now
                log.info("cell %s: another bench run is computing it; this run waits for it after its other cells",
                         key)
                deferred.append(cell)
                continue
            self._claimed_cell(bench, cell, todo, bar, resumed)
        for cell in deferred:  # the other run's: wait for it, then compute it only if that run did not
            self.claims.take(str(cell), wait=True)
            self._claimed_cell(bench, cell, todo, bar, resumed)

    def _claimed_cell(self, bench: SeedBench, cell: CellKey, todo: set[str], bar, resumed: bool) -> None:
        """Compute a cell this run holds the claim on (unless another run stored it meanwhile), store its record
        or its failure, and give the claim back."""
        key, method, condition, level = str(cell), cell.method, cell.condition, cell.budget
        spec, seed = bench.data.spec, bench.seed
        original_key = self._key(spec.name, seed, ORIGINAL, PRUNE_ONLY)
        try:
            self.store.refresh()
            if key in self.store:  # computed by the other run while this one waited or looked
                todo.discard(key)
                bar.update(1)
                return
            inputs = self._cell_inputs(bench, method, condition, level)
            label = " ".join(str(part) for part in (spec.name, f"s{seed}", method, level, condition) if part)
            bar.set_description(label)
            scored = self.work.score_pass(method, inputs[3]) is not None
            prunes = will_prune(method, condition, *inputs[1:3], scored=scored)
            self.stop.running[key] = Running(label, self.times.cell(spec.name, method, condition, prunes))
            try:
                record = self._run_cell(bench, method, condition, inputs, level)
            except Exception as exc:  # noqa: BLE001 - a failed cell must not lose the others
                self.record_failure(key, spec.name, seed, method, condition, f"{type(exc).__name__}: {exc}",
                                    traceback.format_exc())
            else:
                record = self.work.finish(record, key, bench, self.store.get(original_key), stored_original=resumed)
                self.store.add(record)
                warn_other_base(record, self.warned_bases)
                todo.discard(key)
                self.times.add_record(record.to_dict())  # the next seeds' cells are estimated from it
                self.eta.finished(key, record=record.to_dict())
                bar.set_postfix_str(self.eta.text(), refresh=False)
            bar.update(1)
        finally:
            self.stop.running.pop(key, None)
            self.claims.release(key)

    def _cell_inputs(self, bench: SeedBench, method: str, condition: str, level: str | None = None):
        """``(setter record, reused prune step, stored prune-only record, score pass)`` of a cell, as
        :meth:`CellWork.run_cell <benchmark.cells.work.CellWork.run_cell>` takes them: the setter's record and a
        resumed run's prune-only record from the store, this run's last prune step of the method at ``level``; for
        a prune-only cell of a method that ranks once, this (task, seed)'s score pass of it, else a stored
        prune-only record of it at another level of the run (None: it prunes)."""
        spec = bench.data.spec
        setter = self.work.setter()
        setter_record = self.store.get(self._key(spec.name, bench.seed, setter, PRUNE_ONLY)) if setter else None
        reuse = self._pruned.get((spec.name, bench.seed, method, level))
        stored = None
        if reuses_prune(condition) and (reuse is None or reuse.from_record):  # resumed: prune-only was stored
            stored = self.store.get(self._key(spec.name, bench.seed, method, PRUNE_ONLY, level))
        scores = None
        if condition == PRUNE_ONLY and self.work.ranks_once(method):
            scores = self._passes.get((spec.name, bench.seed, method)) or next(
                (r for r in (self.store.get(self._key(spec.name, bench.seed, method, PRUNE_ONLY, other))
                             for other in self.work.levels_of(method) if other != level) if r is not None), None)
        return setter_record, reuse, stored, scores

    def _run_cell(self, bench: SeedBench, method: str, condition: str, inputs, level: str | None = None) -> Record:
        """One cell with its :meth:`_cell_inputs`; a method's prune step is kept for its other conditions, and its
        score pass for its other levels."""
        record, state = self.work.run_cell(bench, method, condition, *inputs[:3], level=level, scores=inputs[3])
        if state is not None:
            task_seed = (bench.data.spec.name, bench.seed)
            self._pruned = {(*task_seed, method, level): state}  # keep one: models are large
            if state.score_pass is not None:
                self._passes.setdefault((*task_seed, method), state.score_pass)
        return record

    def record_failure(self, key: str, task: str, seed: int, method: str, condition: str, error: str,
                       trace: str) -> None:
        """Record a failed cell in ``failures.jsonl`` and ``self.failures``, log it and say it (it is retried by
        the next run)."""
        failure = {"cell": key, "task": task, "seed": seed, "method": method, "condition": condition,
                   "error": error, "traceback": trace, "time": now_utc()}
        self.store.add_failure(failure)
        self.failures.append(failure)
        log.error("cell %s failed: %s", key, error)
        tqdm.write(f"FAILED {key}: {error}")

    # ------------------------------------------------------------------ base model

    def base_folder(self, task: str, seed: int) -> Path:
        """Where the base model of (``task``, ``seed``) is cached."""
        return self.out / BASE_DIR / f"{task}-seed{seed}"

    def base_lock(self, task: str, seed: int) -> Path:
        """The lock file of that base model: processes sharing the folder train it once."""
        return self.out / f".base-{task}-seed{seed}.lock"

    def save_base(self, task: str, seed: int, model, info: dict[str, Any]) -> None:
        """Save a base model fine-tuned elsewhere (a Ray worker) under its (task, seed)'s lock, unless another
        process saved it first.

        Raises:
            RunFolderError: it cannot be saved.
        """
        folder = self.base_folder(task, seed)
        with open(self.base_lock(task, seed), "a+b") as lock, file_lock(lock.fileno()):
            if not (folder / "config.json").exists():
                save_base_model(model, self.tokenizer, folder, info)
        log.info("base model %s trained in %.0f s", folder, info["wall_s"])

    def _base_model(self, data: TaskData, seed: int):
        """Fine-tune the pre-trained model on the (capped) train split with ``seed``, or load it from
        ``DIR/base/<task>-seed<seed>`` when a previous run finished it. Saved atomically (tmp dir + rename).

        Raises:
            RunFolderError: the cached model cannot be loaded, or the fine-tuned one cannot be saved.
        """
        folder = self.base_folder(data.spec.name, seed)
        # one lock per (task, seed): processes sharing the folder that need the same base model train it once;
        # the others wait, then load it
        with open(self.base_lock(data.spec.name, seed), "a+b") as lock, file_lock(lock.fileno()):
            if (folder / "config.json").exists():
                return self.work.load_base(folder)
            key = f"base|{data.spec.name}|{seed}"
            self.stop.running[key] = Running(f"base fine-tune of {data.spec.name} seed {seed}",
                                             self.times.base_estimate(data.spec.name), base=True)
            try:
                model, info = self.work.train_base(data, seed, self.tokenizer,
                                                   should_stop=lambda: self.stop.stops_base_now)
            finally:
                self.stop.running.pop(key, None)
            save_base_model(model, self.tokenizer, folder, info)
            log.info("base model %s trained in %.0f s", folder, info["wall_s"])
            self.times.add_base(data.spec.name, info)
            self.eta.finished(key, base_info=info)
            return model

    def close(self) -> None:
        """Give back this run's claims and stop logging to ``DIR/run.log``."""
        self.claims.release_all()
        if self._handler is not None:
            log.removeHandler(self._handler)
            self._handler.close()
