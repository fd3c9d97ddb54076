"""The benchmark runner: for each (task, seed) fine-tune (or reuse) the base model, then for each method build
the pruning context, prune, evaluate on the GLUE dev split and append one record per cell.

Protocol: shared/reference/protocol.md. A *cell* is (task, seed, method, budget, condition); the base model of a
(task, seed) is fine-tuned once on the (capped) train split, cached in ``DIR/base/`` and shared by every method,
so comparisons are paired by seed. Methods see only the train-derived splits ``mini_train`` / ``mini_dev`` (a
seeded ``mini_dev_fraction`` slice of the train split); the dev split is read only to report.

Conditions (protocol §4): ``prune-only`` always; with ``recover=True`` also ``prune+recover`` (the masked model
re-fine-tuned on mini-train with the same budget for every method, early stopping on mini-dev, mask fixed) and the
``control`` (method ``original``: the unpruned base model given the same extra fine-tuning).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from tqdm.auto import tqdm

import methods
from benchmark import models, tasks, training
from benchmark.config import Budget, ConfigError, Experiment, Preset, config_hash, diff_dicts, parse_budget
from benchmark.store import REJECTED, RecordStore, file_lock
from benchmark.training import Counter, TrainConfig
from methods.base import PruningContext, check_mask
from methods.heads import get_layout

log = logging.getLogger("benchmark")

ORIGINAL = "original"
OWN_BUDGET = "own"  # budget spec of a method that decides its own head count (HeadPruner.own_budget)
PRUNE_ONLY, RECOVER, CONTROL = "prune-only", "prune+recover", "control"
DEGENERATE_CLASS_SHARE = 0.95
MAX_SEED = 2**31 - 1  # a seed feeds numpy's default_rng, torch.manual_seed and context.generator (seed * 1_000_003)


class RunFolderError(OSError):
    """The run folder (or a file in it) cannot be written: a full disk, missing permissions, a file where a
    folder should be. The message names the path; finished cells stay in ``records.jsonl``."""


@dataclass
class RunConfig:
    """Everything ``bench run`` needs (CLI options resolved over a preset)."""

    out: Path
    preset: Preset
    methods: list[str]
    tasks: list[str]
    seeds: list[int]
    budget: Budget
    model: str
    device: str = "auto"
    data_dir: str | None = None
    recover: bool = False
    match_per_layer: bool = False
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    progress: bool = True


# --------------------------------------------------------------------------- provenance


def _git_commit(exclude: Path | None = None) -> str:
    """HEAD of the code's repository, with ``+dirty`` when tracked files differ from it. ``exclude`` (the run
    folder, when it lies inside the repository, e.g. ``results/quick``) is left out of the dirty check: a run
    rewrites its own tracked outputs (run.log, records), which says nothing about the code that made them."""
    root = Path(__file__).resolve().parents[1]
    status = ["git", "status", "--porcelain", "--untracked-files=no"]
    if exclude is not None:
        try:
            rel = Path(exclude).resolve().relative_to(root)
            status += ["--", ".", f":(exclude){rel.as_posix()}"]
        except ValueError:  # the run folder is outside the repository
            pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(status, cwd=root, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return "unknown"
        return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for dist in ("headprune-bench", "torch", "transformers", "datasets", "numpy", "scikit-learn"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def data_hashes(task_list: list[tasks.TaskSpec], data_dir: Path | None) -> dict[str, str]:
    """sha256 (16 hex) of each local TSV file, or the hub dataset name when reading from the hub."""
    if data_dir is None:
        return {t.name: f"hub:{tasks.HUB_DATASET}/{t.hub_config}" for t in task_list}
    out = {}
    for t in task_list:
        for split, fname in tasks.SPLIT_FILES.items():
            path = Path(data_dir) / t.glue_dir / fname
            if path.exists():
                out[f"{t.name}/{fname}"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def quiet_libraries() -> None:
    """Silence transformers' per-load reports and the per-map progress bars of datasets (our own progress bars
    over cells and fine-tuning steps stay)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- data of one task


@dataclass
class TaskData:
    """Encoded splits of one task: ``train`` (capped), ``dev`` (GLUE dev, the reported test set)."""

    spec: tasks.TaskSpec
    train: datasets.Dataset
    dev: datasets.Dataset
    train_labels: np.ndarray
    dev_labels: np.ndarray
    majority: dict[str, Any]


def prepare_task(spec: tasks.TaskSpec, raw: datasets.DatasetDict, tokenizer, preset: Preset,
                 subsample_seed: int) -> TaskData:
    """Cap and tokenise a task's splits (``raw`` from :func:`benchmark.tasks.load_task`). The train cap is a
    fixed seeded subsample (the same for every seed of the run); the dev cap takes the first examples."""
    train, dev = raw["train"], raw["validation"]
    if preset.max_train_examples and len(train) > preset.max_train_examples:
        train = train.shuffle(seed=subsample_seed).select(range(preset.max_train_examples))
    if preset.max_dev_examples and len(dev) > preset.max_dev_examples:
        dev = dev.select(range(preset.max_dev_examples))
    train_labels, dev_labels = np.asarray(train["label"]), np.asarray(dev["label"])
    return TaskData(
        spec=spec,
        train=training.encode(train, spec, tokenizer, preset.max_length),
        dev=training.encode(dev, spec, tokenizer, preset.max_length),
        train_labels=train_labels,
        dev_labels=dev_labels,
        majority=tasks.majority_baseline(spec, train_labels, dev_labels),
    )


def train_splits(n_train: int, seed: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Seeded (mini_train, mini_dev) index arrays over the train split; mini_dev = ``round(fraction * n)``."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_train)
    n_dev = max(1, int(round(fraction * n_train)))
    return np.sort(order[n_dev:]), np.sort(order[:n_dev])


# --------------------------------------------------------------------------- the runner


class Runner:
    """Runs (or resumes) a benchmark into ``config.out``. Use :meth:`run`."""

    def __init__(self, config: RunConfig) -> None:
        self.cfg = config
        self.out = Path(config.out)
        self.device = models.resolve_device(config.device)
        self.task_specs = [tasks.get_task(t) for t in config.tasks]
        self.data_dir = tasks.resolve_data_dir(config.data_dir)
        # Read every task's files now: a missing or malformed file fails the run before any training.
        self.raw = {spec.name: tasks.load_task(spec, self.data_dir) for spec in self.task_specs}
        self.method_names = list(dict.fromkeys(config.methods))
        for name in self.method_names:  # fail fast on unknown names / options
            methods.create(name, **config.method_options.get(name, {}))
        if config.budget.kind == "matched":
            setter = config.budget.value
            if methods.get_method_class(setter).needs_target:
                raise ConfigError(
                    f"--budget matched:{setter}: {setter} itself needs a head count; the budget setter must be a "
                    f"method that decides how many heads to prune (e.g. auber)"
                )
            if setter not in self.method_names:
                raise ConfigError(f"--budget matched:{setter}: add {setter} to --methods (it sets the budget)")
            self.method_names.remove(setter)
            self.method_names.insert(0, setter)
        model_config = models.check_architecture(config.model)
        total_heads = model_config.num_hidden_layers * model_config.num_attention_heads
        config.budget.target(total_heads)  # heads:K beyond the model's head count fails now, not after training
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
        )
        self.budget_label = config.budget.label + ("/per-layer" if config.match_per_layer and config.budget.kind == "matched" else "")
        self._check_run_json()
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

    def _setup_logging(self) -> None:
        handler = logging.FileHandler(self.out / "run.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        self._handler = handler

    def _check_run_json(self) -> None:
        """Refuse a folder made with another experiment configuration; accept a subset or superset of its tasks.

        Read, compared and (when new or extended) written under an exclusive lock on ``DIR/.run.lock``, so
        processes started together into one new folder agree: the first creates ``run.json``, the others read it.
        The data hashes are compared per file: a task this run leaves out is no conflict (one process per task
        may share a folder), a task it adds is merged into ``run.json``; the same file with another hash is
        refused. Afterwards ``self.experiment.data_hashes`` holds the folder's hashes (all its tasks) and
        ``self.config_hash`` the folder's config hash, the one ``run.json`` was created with, which every record of
        the folder carries (adding a task never changes it).

        Raises:
            ConfigError: a setting or a data file's hash differs from the folder's; the message lists each change.
        """
        path = self.out / "run.json"
        with open(self.out / ".run.lock", "a+b") as lock, file_lock(lock.fileno()):
            current = self.experiment.as_dict()
            if not path.exists():
                self.config_hash = self.experiment.digest()
                self._write_run_json(path, {"created": _now()})
                return
            stored = json.loads(path.read_text())
            old = stored.get("experiment", {})
            old_hashes, new_hashes = old.get("data_hashes", {}), current.get("data_hashes", {})
            changes = diff_dicts({k: v for k, v in old.items() if k != "data_hashes"},
                                 {k: v for k, v in current.items() if k != "data_hashes"})
            changes += [f"data_hashes.{f}: {old_hashes[f]!r} -> {new_hashes[f]!r}"
                        for f in sorted(set(old_hashes) & set(new_hashes)) if old_hashes[f] != new_hashes[f]]
            if changes:
                raise ConfigError(
                    f"{path}: this run folder was made with a different configuration; refusing to mix results.\n"
                    f"  " + "\n  ".join(changes) + "\nUse another --out folder, or the same options as before."
                )
            added = sorted(set(new_hashes) - set(old_hashes))
            self.experiment.data_hashes = {**old_hashes, **new_hashes}
            self.config_hash = stored.get("config_hash") or self.experiment.digest()
            if added:
                log.info("run.json: adding data files %s", ", ".join(added))
                self._write_run_json(path, {k: v for k, v in stored.items() if k not in ("experiment", "config_hash")})

    def _write_run_json(self, path: Path, extra: dict[str, Any]) -> None:
        tmp = path.with_name(f"run.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**extra, "experiment": self.experiment.as_dict(),
                                   "config_hash": self.config_hash}, indent=2, sort_keys=True))
        tmp.replace(path)

    # ------------------------------------------------------------------ cells

    def cell_key(self, task: str, seed: int, method: str, condition: str, options: dict[str, Any] | None) -> str:
        budget = self._budget_spec(method)
        opts = "-" if method == ORIGINAL else config_hash(options or {})
        return f"{task}|seed={seed}|{method}|{budget}|{condition}|opts={opts}"

    def _budget_spec(self, method: str) -> str:
        """The budget a cell of ``method`` is keyed and recorded with: ``none`` for the unpruned model, ``own`` for
        a method that decides its own count (``HeadPruner.own_budget``, e.g. AUBER), else the run's budget."""
        if method == ORIGINAL:
            return "none"
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
        opts = None if method == ORIGINAL else methods.create(method, **self.cfg.method_options.get(method, {})).get_options()
        return self.cell_key(task, seed, method, condition, opts)

    # ------------------------------------------------------------------ main loop

    def run(self) -> list[dict[str, Any]]:
        """Compute every missing cell; returns the records of this run's cells (finished ones included).

        Failed cells are written to ``failures.jsonl`` and listed in ``self.failures``; the other cells go on.
        """
        planned = self.planned_cells()
        keys = [self._key(*c) for c in planned]
        todo = {k for k in keys if k not in self.store}
        self.store.add_plan({"started": _now(), "argv": sys.argv[1:], "git_commit": self.provenance["git_commit"],
                             "tasks": list(self.cfg.tasks), "seeds": list(self.cfg.seeds),
                             "methods": self.method_names, "budget": self.budget_label, "recover": self.cfg.recover,
                             "cells": keys, "to_do": len(todo)})
        log.info("run %s: %d cells planned, %d to do (device %s)", self.out, len(keys), len(todo), self.device)
        bar = tqdm(total=len(keys), initial=len(keys) - len(todo), desc="cells", disable=not self.cfg.progress)
        tokenizer = None
        try:
            for spec in self.task_specs:
                seeds_todo = [s for s in self.cfg.seeds
                              if any(self._key(*c) in todo for c in planned if c[0] == spec.name and c[1] == s)]
                if not seeds_todo:
                    continue
                if tokenizer is None:
                    tokenizer = models.load_tokenizer(self.cfg.model)
                    self.tokenizer = tokenizer
                data = prepare_task(spec, self.raw[spec.name], tokenizer, self.cfg.preset, self.experiment.subsample_seed)
                for seed in seeds_todo:
                    cells = [c for c in planned if c[0] == spec.name and c[1] == seed]
                    self._run_seed(data, seed, cells, todo, bar)
        finally:
            bar.close()
        return [self.store.get(k) for k in keys if self.store.get(k) is not None]

    def _run_seed(self, data: TaskData, seed: int, cells, todo: set[str], bar) -> None:
        spec = data.spec
        base = self._base_model(data, seed)
        mini_train_idx, mini_dev_idx = train_splits(len(data.train), seed, self.cfg.preset.mini_dev_fraction)
        splits = {"mini_train": data.train.select(mini_train_idx), "mini_dev": data.train.select(mini_dev_idx),
                  "train": data.train}
        original_key = self._key(spec.name, seed, ORIGINAL, PRUNE_ONLY)
        for task_name, _, method, condition in cells:
            key = self._key(task_name, seed, method, condition)
            if key not in todo:
                continue
            bar.set_description(f"{spec.name} s{seed} {method} {condition}")
            try:
                record = self._run_cell(data, seed, base, splits, method, condition)
            except Exception as exc:  # noqa: BLE001 - a failed cell must not lose the others
                failure = {"cell": key, "task": spec.name, "seed": seed, "method": method, "condition": condition,
                           "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
                           "time": _now()}
                self.store.add_failure(failure)
                self.failures.append(failure)
                log.error("cell %s failed: %s", key, failure["error"])
                tqdm.write(f"FAILED {key}: {failure['error']}")
            else:
                original = self.store.get(original_key)
                record["base_failed"] = bool(original["degenerate"]) if original else record["degenerate"]
                record["cell"] = key
                self.store.add(record)
                todo.discard(key)
            bar.update(1)

    # ------------------------------------------------------------------ base model

    def _base_model(self, data: TaskData, seed: int):
        """Fine-tune the pre-trained model on the (capped) train split with ``seed``, or load it from
        ``DIR/base/<task>-seed<seed>`` when a previous run finished it. Saved atomically (tmp dir + rename)."""
        folder = self.out / "base" / f"{data.spec.name}-seed{seed}"
        if (folder / "config.json").exists():
            log.info("reusing base model %s", folder)
            from transformers import AutoModelForSequenceClassification

            return AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).to(self.device).eval()
        torch.manual_seed(seed)  # the classification head's initialisation
        model = models.load_classifier(self.cfg.model, data.spec.num_labels).to(self.device)
        start = time.time()
        training.fine_tune(model, data.train, self.tokenizer, self.device, self.cfg.preset.train, seed=seed,
                           desc=f"base {data.spec.name} s{seed}", progress=self.cfg.progress)
        tmp = folder.with_name(folder.name + ".tmp")
        try:
            if tmp.exists():
                shutil.rmtree(tmp)
            model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)  # a complete Hugging Face folder: loadable with its tokenizer
            (tmp / "train_info.json").write_text(json.dumps({"wall_s": time.time() - start, "examples": len(data.train),
                                                             "seed": seed, "finished": _now()}))
            tmp.replace(folder)
        except Exception as exc:  # disk full, permissions, base/ not a folder; safetensors raises its own types
            shutil.rmtree(tmp, ignore_errors=True)  # leave no half-written folder behind
            raise RunFolderError(f"{folder}: cannot save the fine-tuned base model ({type(exc).__name__}: "
                                 f"{exc})") from exc
        log.info("base model %s trained in %.0f s", folder, time.time() - start)
        return model.eval()

    # ------------------------------------------------------------------ one cell

    def _context(self, data: TaskData, seed: int, splits: dict[str, datasets.Dataset], counter: Counter,
                 target: int | None, target_per_layer: list[int] | None, layout) -> PruningContext:
        spec, tok, device, recover = data.spec, self.tokenizer, self.device, self.cfg.preset.recover

        def view(split: str, indices=None) -> datasets.Dataset:
            if split not in splits:
                raise ValueError(f"unknown split {split!r}; a method may use {sorted(splits)}")
            return splits[split] if indices is None else splits[split].select([int(i) for i in indices])

        def batches(split: str, batch_size: int = 32, shuffle: bool = False, seed: int | None = None, indices=None):
            return training.iterate(view(split, indices), tok, batch_size, device, shuffle=shuffle, seed=seed,
                                    counter=counter)

        def evaluate(model, mask=None, split: str = "mini_dev", indices=None) -> dict[str, float]:
            metrics, _ = training.evaluate(model, view(split, indices), spec, tok, device, mask=mask, counter=counter)
            return {spec.primary_metric: metrics[spec.primary_metric], **metrics}

        def fine_tune(model, mask=None, split: str = "mini_train", indices=None, eval_split: str = "mini_dev",
                      eval_indices=None, **overrides):
            cfg = dataclasses.replace(recover, **overrides)
            eval_fn = None
            if cfg.early_stopping:
                eval_fn = lambda m: evaluate(m, mask, eval_split, eval_indices)[spec.primary_metric]  # noqa: E731
            model, _ = training.fine_tune(model, view(split, indices), tok, device, cfg, seed=seed, mask=mask,
                                          eval_fn=eval_fn, counter=counter, progress=self.cfg.progress)
            return model

        def load_pretrained():
            torch.manual_seed(seed)
            return models.load_classifier(self.cfg.model, spec.num_labels).to(device)

        return PruningContext(
            task=spec.name, primary_metric=spec.primary_metric, seed=seed, num_layers=layout.num_layers,
            num_heads=layout.num_heads, batches=batches, num_examples=lambda s: len(view(s)), evaluate=evaluate,
            fine_tune=fine_tune, target_heads=target, target_per_layer=target_per_layer,
            load_pretrained=load_pretrained, tokenizer_info=models.tokenizer_info(tok), device=device,
            compute_metrics=lambda preds, labels: tasks.compute_metrics(spec, preds, labels),
            log=lambda msg: log.info("[%s s%d] %s", spec.name, seed, msg),
            count_backward=lambda n: setattr(counter, "backward", counter.backward + int(n)),
        )

    def _target(self, spec: tasks.TaskSpec, seed: int, total_heads: int) -> tuple[int | None, list[int] | None, str]:
        budget = self.cfg.budget
        if budget.kind != "matched":
            return budget.target(total_heads), None, budget.label
        setter = budget.value
        rec = self.store.get(self._key(spec.name, seed, setter, PRUNE_ONLY))
        if rec is None:
            raise RuntimeError(f"budget {budget.label}: the {setter} cell of {spec.name} seed {seed} has no record "
                               f"(it failed or has not run); cannot match its head count")
        per_layer = [int(sum(1 for v in row if v == 0)) for row in rec["mask"]] if self.cfg.match_per_layer else None
        return rec["budget"]["achieved"], per_layer, f"{budget.label} ({setter} pruned {rec['budget']['achieved']})"

    def _run_cell(self, data: TaskData, seed: int, base, splits, method: str, condition: str) -> dict[str, Any]:
        spec = data.spec
        layout = get_layout(base)
        total = layout.num_layers * layout.num_heads
        counter = Counter()
        started, t0 = _now(), time.time()
        options: dict[str, Any] = {}
        trace: dict[str, Any] = {}
        scores = None
        prune_s = 0.0
        target = None
        budget_note = "none"
        model = base
        if method == ORIGINAL:
            mask = torch.ones(layout.num_layers, layout.num_heads)
        else:
            pruner = methods.create(method, **self.cfg.method_options.get(method, {}))
            options = pruner.get_options()
            is_setter = self.cfg.budget.kind == "matched" and method == self.cfg.budget.value
            if is_setter:
                target, per_layer, budget_note = None, None, f"decides its own count; sets the budget {self.budget_label}"
            elif pruner.own_budget:
                target, per_layer, budget_note = None, None, "decides its own count"
            else:
                target, per_layer, budget_note = self._target(spec, seed, total)
            if target is None and pruner.needs_target and not is_setter:
                raise ConfigError(f"method '{method}' needs a head budget")
            cache_key = (spec.name, seed, method)
            if cache_key in self._pruned:  # the prune-only cell of this method just ran: same mask, no recompute
                result, prune_s, prune_cost = self._pruned[cache_key]
                counter.forward += prune_cost["forward_examples"]
                counter.backward += prune_cost["backward_examples"]
            else:
                ctx = self._context(data, seed, splits, counter, target, per_layer, layout)
                work = training.clone_model(base)
                t_prune = time.time()
                result = pruner.prune(work, ctx)
                prune_s = time.time() - t_prune
                self._pruned = {cache_key: (result, prune_s, counter.as_dict())}  # keep one: models are large
            mask = check_mask(result.mask, layout.num_layers, layout.num_heads, where=f"method '{method}' result")
            scores = None if result.scores is None else result.scores.detach().cpu().float().tolist()
            trace = result.trace
            model = result.model if result.retrained and result.model is not None else base
        if condition in (RECOVER, CONTROL):
            model = training.clone_model(model)
            ctx = self._context(data, seed, splits, counter, target, None, layout)
            model = ctx.fine_tune(model, mask if condition == RECOVER else None)
        metrics, preds = training.evaluate(model, data.dev, spec, self.tokenizer, self.device,
                                           mask=None if method == ORIGINAL and condition != RECOVER else mask,
                                           counter=counter)
        score = metrics[spec.primary_metric]
        majority_score = data.majority[spec.primary_metric]
        share = tasks.predicted_class_fraction(preds)
        reasons = []
        if score <= majority_score:
            reasons.append(f"{spec.primary_metric} {score:.4f} <= majority baseline {majority_score:.4f}")
        if share > DEGENERATE_CLASS_SHARE:
            reasons.append(f"predicts one class for {share:.1%} of dev examples")
        achieved = int((mask == 0).sum())
        return {
            "schema": 1,
            "task": spec.name,
            "seed": seed,
            "method": method,
            "method_options": options,
            "condition": condition,
            "budget": {"spec": self._budget_spec(method), "target": target,
                       "achieved": achieved, "note": budget_note},
            "heads_total": total,
            "heads_pruned": achieved,
            "mask": mask.int().tolist(),
            "scores": scores,
            "retrained": bool(method != ORIGINAL and model is not base and condition == PRUNE_ONLY),
            "metrics": metrics,
            "primary_metric": spec.primary_metric,
            "score": score,
            "majority_baseline": data.majority,
            "degenerate": bool(reasons),
            "degenerate_reason": "; ".join(reasons) or None,
            "predicted_class_share": share,
            "predictions": preds.tolist(),
            "labels": data.dev_labels.tolist(),
            "splits": {"train": len(data.train), "mini_train": len(splits["mini_train"]),
                       "mini_dev": len(splits["mini_dev"]), "dev": len(data.dev)},
            "trace": trace,
            "cost": {"wall_s": round(time.time() - t0, 3), "prune_wall_s": round(prune_s, 3),
                     "device": str(self.device), **counter.as_dict()},
            "provenance": self.provenance,
            "started_at": started,
            "finished_at": _now(),
        }

    def close(self) -> None:
        log.removeHandler(self._handler)
        self._handler.close()


def make_run_config(*, out: str | Path, preset: str, methods_spec: str, tasks_spec: str, seeds: str | None,
                    model: str | None, budget: str | None, device: str, data_dir: str | None, recover: bool,
                    match_per_layer: bool = False, method_options: dict[str, dict[str, Any]] | None = None, progress: bool = True) -> RunConfig:
    """Resolve CLI strings over a preset into a :class:`RunConfig`.

    ``seeds``: ``"N"`` = seeds 0..N-1, or ``"a,b,c"`` (each in ``[0, 2**31 - 1]``, none twice); ``None`` = the
    preset's.

    Raises:
        ConfigError / tasks.DataError / methods.UnknownMethodError: naming the bad option.
    """
    from benchmark.config import get_preset

    p = get_preset(preset)
    if methods_spec.strip() == "all":  # every method but the ablations (name those explicitly)
        names = [n for n, cls in methods.available_methods().items() if not cls.ablation_of]
    else:
        names = [m.strip() for m in methods_spec.split(",") if m.strip()]
        for name in names:
            try:
                methods.get_method_class(name)
            except methods.UnknownMethodError as exc:
                raise ConfigError(f"--methods: {exc}") from None
    if not names:
        raise ConfigError("--methods: no method given")
    try:
        task_names = [t.name for t in tasks.resolve_tasks(tasks_spec)]
    except ValueError as exc:
        raise ConfigError(f"--tasks: {exc}") from None
    if seeds is None:
        seed_list = list(p.seeds)
    elif seeds.strip().isdigit() and "," not in seeds:
        seed_list = list(range(int(seeds)))
        if not seed_list:
            raise ConfigError("--seeds 0: N is a count (seeds 0..N-1) and must be >= 1; for seed 0 alone write "
                              "--seeds 1, for a list of seeds a,b,c (e.g. --seeds 0,4)")
    else:
        try:
            seed_list = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise ConfigError(f"--seeds {seeds!r}: expected N or a comma-separated list of integers") from None
        if not seed_list:
            raise ConfigError(f"--seeds {seeds!r}: no seed given; expected N or a comma-separated list of integers")
    bad = [s for s in seed_list if not 0 <= s <= MAX_SEED]
    if bad:
        raise ConfigError(f"--seeds {seeds}: every seed must be an integer in [0, {MAX_SEED}] (numpy and torch seed "
                          f"generators take non-negative seeds), got {', '.join(map(str, bad))}")
    repeated = sorted({s for s in seed_list if seed_list.count(s) > 1})
    if repeated:
        raise ConfigError(f"--seeds {seeds}: seed(s) {', '.join(map(str, repeated))} given more than once; "
                          f"a seed is one paired replicate, list each once")
    parsed_budget = parse_budget(budget or p.budget)
    if match_per_layer and parsed_budget.kind != "matched":
        raise ConfigError(f"--match-per-layer matches a budget setter's per-layer counts: it needs --budget "
                          f"matched:METHOD, not {parsed_budget.label}")
    for m, given in (method_options or {}).items():
        if m not in names:
            shown = ", ".join(f"{m}.{k}" for k in given)
            raise ConfigError(f"--option {shown}: method '{m}' is not in --methods ({', '.join(names)})")
    merged_options = {m: dict(o) for m, o in p.method_options.items()}
    for name in names:  # an ablation gets the preset's sizing of the method it ablates
        parent = methods.get_method_class(name).ablation_of
        if parent in p.method_options and name not in merged_options:
            merged_options[name] = dict(p.method_options[parent])
    for m, o in (method_options or {}).items():
        merged_options.setdefault(m, {}).update(o)
    return RunConfig(out=Path(out), preset=p, methods=names, tasks=task_names, seeds=seed_list,
                     budget=parsed_budget, model=model or p.model, device=device,
                     data_dir=data_dir, recover=recover, match_per_layer=match_per_layer,
                     method_options=merged_options, progress=progress)
