"""One cell of the benchmark, in steps: the data of a task, what the cells of a (task, seed) share, the pruning
context a method sees, the condition step (re-fine-tuning), the dev evaluation and the assembly of the
:class:`~headprune_bench.benchmark.store.records.Record` (protocol: docs/protocol.md).

The runner (:mod:`benchmark.run.runner`) decides which cells to run, the budget of each and the prune step (it keeps
the pruned result between the two conditions of a method); everything here is per cell and keeps no state.
"""
from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass, field
from typing import Any

import datasets
import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from headprune_bench.benchmark import models, tasks, training
from headprune_bench.benchmark.config.presets import Preset, TrainConfig
from headprune_bench.benchmark.store.records import CONTROL, NO_BUDGET, ORIGINAL, OWN, RECOVER, BudgetInfo, Cost, Record
from headprune_bench.benchmark.training import Counter
from headprune_bench.methods.base import PruningContext, PruningResult, check_head_scales, check_mask
from headprune_bench.methods.heads import get_layout, scale_value_heads

log = logging.getLogger("benchmark")

DEGENERATE_CLASS_SHARE = 0.95
"""A cell whose dev predictions fall in one class for more than this share is degenerate (protocol.md §6)."""

# --------------------------------------------------------------------------- data of one task


@dataclass
class TaskData:
    """Encoded splits of one task: ``train`` (capped), ``dev`` (GLUE dev, the reported test set), their labels
    (``[N]`` int arrays) and the majority-class baseline on dev (:func:`benchmark.tasks.majority_baseline`)."""

    spec: tasks.TaskSpec
    train: datasets.Dataset
    dev: datasets.Dataset
    train_labels: np.ndarray
    dev_labels: np.ndarray
    majority: dict[str, Any]


def prepare_task(spec: tasks.TaskSpec, raw: datasets.DatasetDict, tokenizer, preset: Preset,
                 subsample_seed: int) -> TaskData:
    """Cap and tokenise a task's splits (``raw`` from :func:`benchmark.tasks.load_task`). The train cap is a
    fixed seeded subsample (the same for every seed of the run); the dev cap takes the first examples.

    Raises:
        ValueError: a split is empty (no majority baseline).
    """
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
    """Seeded (mini_train, mini_dev) sorted index arrays over the ``n_train`` train examples; mini_dev has
    ``max(1, round(fraction * n_train))`` of them, mini_train the rest."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_train)
    n_dev = max(1, int(round(fraction * n_train)))
    return np.sort(order[n_dev:]), np.sort(order[:n_dev])


# --------------------------------------------------------------------------- what the cells of a (task, seed) share


@dataclass
class SeedBench:
    """What every cell of one (task, seed) shares: the task's data, the fine-tuned base model (never modified:
    each cell works on copies), the train-derived splits a method may read (``mini_train``, ``mini_dev``,
    ``train``), and how to fine-tune (``recover``: the re-fine-tuning recipe of protocol §4)."""

    data: TaskData
    seed: int
    base: nn.Module
    splits: dict[str, datasets.Dataset]
    tokenizer: Any
    device: torch.device
    model_name: str
    recover: TrainConfig
    progress: bool = True
    precision: str = "fp32"
    base_failed: bool | None = None
    """Whether the base model is degenerate on dev, when the runner had to evaluate it itself (else None)."""
    base_checked: bool = False
    """Whether ``CellWork.base_check`` has run on this bench."""
    base_differs: int | None = None
    """Its count of dev predictions that differ from the stored original record (None: unchecked, or no comparison)."""
    min_heads_per_layer: int = 0
    """The run's per-layer floor, which the pruning context passes on (``PruningContext.min_heads_per_layer``)."""
    calibration: Any = None
    """The repair cells' calibration context (``cells.repairing.calibration``), built by the first that needs it."""
    layout: Any = field(init=False)

    def __post_init__(self) -> None:
        self.layout = get_layout(self.base)

    @property
    def total_heads(self) -> int:
        """Heads of the model, ``L * H``."""
        return self.layout.num_layers * self.layout.num_heads

    def view(self, split: str, indices=None) -> datasets.Dataset:
        """A split a method may read, or the rows ``indices`` of it.

        Raises:
            ValueError: not one of the train-derived splits (the dev split is never shown to a method).
        """
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; a method may use {sorted(self.splits)}")
        return self.splits[split] if indices is None else self.splits[split].select([int(i) for i in indices])

    def context(self, counter: Counter, target: int | None, target_per_layer: list[int] | None) -> PruningContext:
        """The :class:`methods.base.PruningContext` of one cell: batches, evaluation and fine-tuning on the
        train-derived splits, all counted in ``counter``, with the head budget ``target`` (total) and
        ``target_per_layer`` (``[L]`` counts, or None)."""
        spec, tok, device, seed = self.data.spec, self.tokenizer, self.device, self.seed

        def batches(split: str, batch_size: int = 32, shuffle: bool = False, seed: int | None = None, indices=None):
            return training.iterate(self.view(split, indices), tok, batch_size, device, shuffle=shuffle, seed=seed,
                                    counter=counter)

        def evaluate(model, mask=None, split: str = "mini_dev", indices=None) -> dict[str, float]:
            metrics, _ = training.evaluate(model, self.view(split, indices), spec, tok, device, mask=mask,
                                           counter=counter, precision=self.precision)
            return {spec.primary_metric: metrics[spec.primary_metric], **metrics}

        def fine_tune(model, mask=None, split: str = "mini_train", indices=None, eval_split: str = "mini_dev",
                      eval_indices=None, **overrides):
            cfg = dataclasses.replace(self.recover, **overrides)
            eval_fn = None
            if cfg.early_stopping:
                eval_fn = lambda m: evaluate(m, mask, eval_split, eval_indices)[spec.primary_metric]  # noqa: E731
            model, _ = training.fine_tune(model, self.view(split, indices), tok, device, cfg, seed=seed, mask=mask,
                                          eval_fn=eval_fn, counter=counter, progress=self.progress,
                                          precision=self.precision)
            return model

        def load_pretrained():
            torch.manual_seed(seed)
            return models.load_classifier(self.model_name, spec.num_labels).to(device)

        return PruningContext(
            task=spec.name, primary_metric=spec.primary_metric, seed=seed, num_layers=self.layout.num_layers,
            num_heads=self.layout.num_heads, batches=batches, num_examples=lambda s: len(self.view(s)),
            evaluate=evaluate, fine_tune=fine_tune, target_heads=target, target_per_layer=target_per_layer,
            load_pretrained=load_pretrained, tokenizer_info=models.tokenizer_info(tok), device=device,
            compute_metrics=lambda preds, labels: tasks.compute_metrics(spec, preds, labels),
            log=lambda msg: _method_says(f"[{spec.name} s{seed}] {msg}"),
            count_backward=lambda n: setattr(counter, "backward", counter.backward + int(n)),
            precision=self.precision, min_heads_per_layer=self.min_heads_per_layer,
        )


def _method_says(message: str) -> None:
    """A method's progress line (``PruningContext.log``): into ``run.log`` and on screen (on Ray, the worker's
    stderr reaches the driver's screen)."""
    log.info("%s", message)
    tqdm.write(message, file=sys.stderr)


# --------------------------------------------------------------------------- the steps of one cell


@dataclass
class Pruned:
    """The prune step's outcome for one cell.

    Attributes:
        mask: ``[L, H]`` float32 CPU tensor, 1 keep, 0 prune (all ones for the unpruned model).
        model: the base model: every condition but ``own-fine-tuning`` starts from it (protocol §4); for a result
            with ``head_scales``, a copy with the scales folded into its value heads (the scaled masked model).
        own_model: the method's re-trained model (``PruningResult.retrained``), else None.
        options: the method's options (``HeadPruner.get_options``; ``{}`` for the unpruned model).
        budget: the budget asked for (``achieved`` is the mask's count of zeros).
        scores: the method's per-head scores as ``[L][H]`` lists, or None.
        trace: the method's JSON details.
        prune_s: seconds the method took (0 for the unpruned model or a reused result).
        head_scales: the kept heads' scales as ``[L][H]`` lists (0 at pruned heads), or None (all whole).
    """

    mask: torch.Tensor
    model: nn.Module
    options: dict[str, Any]
    budget: BudgetInfo
    scores: list[list[float]] | None = None
    trace: dict[str, Any] = field(default_factory=dict)
    prune_s: float = 0.0
    own_model: nn.Module | None = None
    head_scales: list[list[float]] | None = None


def unpruned(bench: SeedBench) -> Pruned:
    """The prune step of the unpruned model (method ``original``): every head kept, the base model."""
    layout = bench.layout
    return Pruned(mask=torch.ones(layout.num_layers, layout.num_heads), model=bench.base, options={},
                  budget=BudgetInfo(spec=NO_BUDGET, target=None, achieved=0, note=NO_BUDGET))


def pruned_by(bench: SeedBench, method: str, result: PruningResult, options: dict[str, Any], budget: BudgetInfo,
              prune_s: float) -> Pruned:
    """The prune step's outcome from a method's :class:`~headprune_bench.methods.base.PruningResult`.

    Raises:
        ValueError: the result's mask is not a 0/1 ``[L, H]`` mask (the message names the method).
    """
    layout = bench.layout
    mask = check_mask(result.mask, layout.num_layers, layout.num_heads, where=f"method '{method}' result")
    scores = None if result.scores is None else result.scores.detach().cpu().float().tolist()
    own = result.model if result.retrained and result.model is not None else None
    budget = dataclasses.replace(budget, achieved=int((mask == 0).sum()))
    model, scales = bench.base, None
    if result.head_scales is not None:
        scales = check_head_scales(result.head_scales, mask, where=f"method '{method}' result's head_scales")
        model = scale_value_heads(training.clone_model(bench.base), torch.where(mask == 1, scales, 1.0))
        scales = scales.tolist()
    return Pruned(mask=mask, model=model, options=options, budget=budget, scores=scores, trace=result.trace,
                  prune_s=prune_s, own_model=own, head_scales=scales)


def condition_step(bench: SeedBench, pruned: Pruned, condition: str, counter: Counter) -> nn.Module:
    """The model a cell evaluates (protocol §4): for ``prune-only`` the base model; for ``prune+recover`` a copy of
    it re-fine-tuned on mini-train with the mask fixed, for ``control`` a copy re-fine-tuned without a mask; for
    ``own-fine-tuning`` the method's re-trained model (the base model when it returned none)."""
    if condition == OWN:  # (a prune step that travelled between Ray processes holds its model on the CPU)
        return pruned.own_model.to(bench.device) if pruned.own_model is not None else pruned.model
    if condition not in (RECOVER, CONTROL):
        return pruned.model
    model = training.clone_model(pruned.model)
    ctx = bench.context(counter, pruned.budget.target, None)
    return ctx.fine_tune(model, pruned.mask if condition == RECOVER else None)


@dataclass
class DevResult:
    """A cell's evaluation on the dev split: the task's metrics (fractions), the predictions (``[N]`` class ids),
    the share of the most predicted class, and why the cell is degenerate (empty: it is not)."""

    metrics: dict[str, float]
    predictions: np.ndarray
    share: float
    reasons: list[str]


def evaluate_on_dev(bench: SeedBench, model: nn.Module, mask: torch.Tensor | None, counter: Counter) -> DevResult:
    """Evaluate ``model`` with the ``[L, H]`` head ``mask`` (None: no mask) on the dev split and flag it degenerate
    (protocol §6): at or below the majority baseline, or one class for more than :data:`DEGENERATE_CLASS_SHARE`."""
    spec = bench.data.spec
    metrics, preds = training.evaluate(model, bench.data.dev, spec, bench.tokenizer, bench.device, mask=mask,
                                       counter=counter, precision=bench.precision)
    score = metrics[spec.primary_metric]
    majority_score = bench.data.majority[spec.primary_metric]
    share = tasks.predicted_class_fraction(preds)
    reasons = []
    if score <= majority_score:
        reasons.append(f"{spec.primary_metric} {score:.4f} <= majority baseline {majority_score:.4f}")
    if share > DEGENERATE_CLASS_SHARE:
        reasons.append(f"predicts one class for {share:.1%} of dev examples")
    return DevResult(metrics=metrics, predictions=preds, share=share, reasons=reasons)


def dev_mask(method: str, condition: str, pruned: Pruned) -> torch.Tensor | None:
    """The head mask the dev evaluation applies: none for the unpruned model, else the pruned mask."""
    return None if method == ORIGINAL and condition != RECOVER else pruned.mask


def assemble_record(bench: SeedBench, method: str, condition: str, pruned: Pruned, dev: DevResult, cost: Cost,
                    provenance: dict[str, Any], started_at: str, finished_at: str) -> Record:
    """The :class:`benchmark.store.records.Record` of one cell (its ``cell`` key and ``base_failed`` are left to the
    runner, which knows the key it planned and the unpruned cell's record)."""
    data, spec = bench.data, bench.data.spec
    return Record(
        task=spec.name, seed=bench.seed, method=method, method_options=pruned.options, condition=condition,
        budget=pruned.budget, heads_total=bench.total_heads, heads_pruned=pruned.budget.achieved,
        mask=pruned.mask.int().tolist(), scores=pruned.scores, head_scales=pruned.head_scales,
        retrained=bool(condition == OWN and pruned.own_model is not None),
        metrics=dev.metrics, primary_metric=spec.primary_metric, score=dev.metrics[spec.primary_metric],
        majority_baseline=data.majority, degenerate=bool(dev.reasons),
        degenerate_reason="; ".join(dev.reasons) or None, predicted_class_share=dev.share,
        predictions=dev.predictions.tolist(), labels=data.dev_labels.tolist(),
        splits={"train": len(data.train), "mini_train": len(bench.splits["mini_train"]),
                "mini_dev": len(bench.splits["mini_dev"]), "dev": len(data.dev)},
        trace=pruned.trace, cost=cost, provenance=provenance, started_at=started_at, finished_at=finished_at,
    )
