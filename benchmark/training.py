"""Tokenisation, batching, seeded fine-tuning and evaluation (with an optional fixed ``[L, H]`` head mask). The
recipe and its sources: docs/choices.md ("Fine-tuning")."""
from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import datasets
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import DataCollatorWithPadding, get_linear_schedule_with_warmup

from headprune_bench.benchmark.config.presets import PRECISIONS, TrainConfig
from headprune_bench.benchmark.tasks import TaskSpec, compute_metrics
from headprune_bench.methods.base import MODEL_INPUTS
from headprune_bench.methods.heads import apply_head_mask

__all__ = ["TrainConfig", "Counter", "MODEL_INPUTS", "PRECISIONS", "autocast", "encode", "iterate", "predict",
           "evaluate", "fine_tune", "clone_model"]


def autocast(device: torch.device, precision: str):
    """The autocast context of ``precision`` on ``device``: ``torch.autocast(device.type, torch.bfloat16)`` for
    ``bf16`` (no loss scaling needed: bfloat16 keeps float32's exponent range), a no-op for ``fp32``.

    Raises:
        ValueError: ``precision`` is not one of :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")


@dataclass
class Counter:
    """Examples processed, for the cost columns of a record."""

    forward: int = 0
    backward: int = 0

    def as_dict(self) -> dict[str, int]:
        """``{"forward_examples", "backward_examples"}``, the cost fields of a record."""
        return {"forward_examples": self.forward, "backward_examples": self.backward}


def encode(dataset: datasets.Dataset, task: TaskSpec, tokenizer, max_length: int) -> datasets.Dataset:
    """Tokenise a GLUE split (the hub schema) into ``input_ids``, ``attention_mask``, ``token_type_ids``,
    ``labels``; truncation to ``max_length`` tokens, no padding (batches pad dynamically)."""

    def tok(batch: dict[str, list]) -> dict[str, list]:
        texts = [batch[f] for f in task.text_fields]
        out = tokenizer(*texts, truncation=True, max_length=max_length)
        out["labels"] = batch["label"]
        return out

    keep = [c for c in dataset.column_names]
    encoded = dataset.map(tok, batched=True, remove_columns=keep, load_from_cache_file=False, keep_in_memory=True)
    columns = [c for c in (*MODEL_INPUTS, "labels") if c in encoded.column_names]
    return encoded.with_format("torch", columns=columns)


def iterate(dataset: datasets.Dataset, tokenizer, batch_size: int, device: torch.device, shuffle: bool = False,
            seed: int | None = None, counter: Counter | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Dynamically padded batches (``[B, T]`` inputs, ``[B]`` labels) on ``device``; a seeded shuffle."""
    gen = None
    if shuffle:
        gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=gen,
                        collate_fn=DataCollatorWithPadding(tokenizer, return_tensors="pt"))
    for batch in loader:
        if counter is not None:
            counter.forward += int(batch["input_ids"].shape[0])
        yield {k: v.to(device) for k, v in batch.items()}


@torch.no_grad()
def predict(model: nn.Module, dataset: datasets.Dataset, tokenizer, device: torch.device,
            mask: torch.Tensor | None = None, batch_size: int = 64, counter: Counter | None = None,
            precision: str = "fp32") -> np.ndarray:
    """Predicted class ids ``[N]`` (int64) in the dataset's order, eval mode, no gradients.

    Examples are batched by length (sorted, then restored) so little padding is computed; ``mask`` is an
    ``[L, H]`` head mask applied for the call; the forward passes run under :func:`autocast` of ``precision``.
    """
    model.eval()
    lengths = np.asarray([len(x) for x in dataset.with_format(None)["input_ids"]])
    order = np.argsort(lengths, kind="stable")
    preds = np.empty(len(dataset), dtype=np.int64)
    handle = apply_head_mask(model, mask.to(device)) if mask is not None else None
    try:
        collate = DataCollatorWithPadding(tokenizer, return_tensors="pt")
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batch = collate([dataset[int(i)] for i in idx])
            inputs = {k: v.to(device) for k, v in batch.items() if k in MODEL_INPUTS}
            with autocast(device, precision):
                logits = model(**inputs).logits
            preds[idx] = logits.argmax(-1).cpu().numpy()
            if counter is not None:
                counter.forward += len(idx)
    finally:
        if handle is not None:
            handle.remove()
    return preds


def evaluate(model: nn.Module, dataset: datasets.Dataset, task: TaskSpec, tokenizer, device: torch.device,
             mask: torch.Tensor | None = None, counter: Counter | None = None,
             precision: str = "fp32") -> tuple[dict[str, float], np.ndarray]:
    """All of the task's GLUE metrics on ``dataset`` and the per-example predictions ``[N]`` (forward passes in
    ``precision``, see :func:`autocast`)."""
    preds = predict(model, dataset, tokenizer, device, mask=mask, counter=counter, precision=precision)
    labels = np.asarray(dataset.with_format(None)["labels"])
    return compute_metrics(task, preds, labels), preds


def fine_tune(model: nn.Module, train: datasets.Dataset, tokenizer, device: torch.device, cfg: TrainConfig,
              seed: int, mask: torch.Tensor | None = None,
              eval_fn: Callable[[nn.Module], float] | None = None, counter: Counter | None = None,
              desc: str = "fine-tune", progress: bool = True,
              precision: str = "fp32",
              should_stop: Callable[[], bool] | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Fine-tune ``model`` in place on ``train`` with a fixed head mask; returns it (best state when early
    stopping) and a log ``{"steps", "history", "best_score", "stopped_early"}``.

    Args:
        mask: ``[L, H]`` head mask held fixed during training (pruned heads get no signal through the output).
        eval_fn: ``eval_fn(model) -> score`` (higher is better) used for early stopping; required when
            ``cfg.early_stopping``.
        cfg.epochs: may be fractional (e.g. 0.5 = half an epoch of steps).
        precision: the forward passes' :func:`autocast` (``fp32`` or ``bf16``); the backward pass, the loss and
            the optimiser work on float32 parameters either way.
        should_stop: asked after every optimiser step; True ends the fine-tune there with :class:`TrainingStopped`
            (``bench run``'s first Ctrl-C stops a base fine-tune this way).

    Raises:
        ValueError: early stopping without ``eval_fn``, or an empty training set.
        TrainingStopped: ``should_stop`` returned True (the model is then half trained).
    """
    if len(train) == 0:
        raise ValueError("fine_tune: empty training set")
    autocast(device, precision)  # an unknown precision fails before any work
    if cfg.early_stopping and eval_fn is None:
        raise ValueError("fine_tune: early_stopping needs an eval_fn on a train-derived split")
    torch.manual_seed(seed)  # dropout and any other torch randomness
    model.to(device)
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total_steps = max(1, int(round(cfg.epochs * steps_per_epoch)))
    optimizer, scheduler = _optimizer(model, cfg, total_steps)
    eval_every = max(1, steps_per_epoch // max(1, cfg.evals_per_epoch))
    best = _BestState(cfg.patience)
    handle = apply_head_mask(model, mask.to(device)) if mask is not None else None
    step = 0
    bar = tqdm(total=total_steps, desc=desc, leave=False, disable=not progress)
    try:
        epoch = 0
        while step < total_steps and not best.stopped:
            model.train()
            for batch in iterate(train, tokenizer, cfg.batch_size, device, shuffle=True, seed=seed * 1000 + epoch):
                loss = _step(model, batch, optimizer, scheduler, cfg.max_grad_norm, counter, precision)
                step += 1
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}")
                if cfg.early_stopping and (step % eval_every == 0 or step == total_steps):
                    best.update(model, step, float(eval_fn(model)))
                    model.train()
                if step >= total_steps or best.stopped:
                    break
                if should_stop is not None and should_stop():
                    raise TrainingStopped(step, total_steps)
            epoch += 1
    finally:
        bar.close()
        if handle is not None:
            handle.remove()
    if best.state is not None:
        model.load_state_dict(best.state)
    model.eval()
    return model, {"steps": step, "history": best.history,
                   "best_score": None if best.state is None else best.score, "stopped_early": best.stopped}


class TrainingStopped(Exception):
    """:func:`fine_tune` ended on request (its ``should_stop``) after ``steps`` of ``total_steps`` steps."""

    def __init__(self, steps: int, total_steps: int) -> None:
        super().__init__(f"stopped on request after step {steps} of {total_steps}")
        self.steps, self.total_steps = steps, total_steps


def _optimizer(model: nn.Module, cfg: TrainConfig, total_steps: int):
    """AdamW (no weight decay on biases and LayerNorm weights) and its linear warm-up / decay schedule."""
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in named if not n.endswith(no_decay)], "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in named if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr)
    return optimizer, get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)


def _step(model: nn.Module, batch: dict[str, torch.Tensor], optimizer, scheduler, max_grad_norm: float,
          counter: Counter | None, precision: str = "fp32") -> float:
    """One optimisation step on ``batch`` (cross-entropy, gradients clipped to ``max_grad_norm``); its loss. Only
    the forward pass runs under :func:`autocast`."""
    labels = batch.pop("labels")
    with autocast(batch["input_ids"].device, precision):
        logits = model(**batch).logits
    loss = F.cross_entropy(logits.float(), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    if counter is not None:
        counter.forward += len(labels)
        counter.backward += len(labels)
    return loss.item()


@dataclass
class _BestState:
    """Early stopping's bookkeeping: the best score and a copy of the weights that reached it, the evaluations
    since (``stopped`` after ``patience`` without improvement) and the history ``[{"step", "score"}]``."""

    patience: int
    score: float = -math.inf
    state: dict[str, torch.Tensor] | None = None
    bad_evals: int = 0
    stopped: bool = False
    history: list[dict[str, float]] = field(default_factory=list)

    def update(self, model: nn.Module, step: int, score: float) -> None:
        """Record the evaluation ``score`` of ``model`` at ``step``."""
        self.history.append({"step": step, "score": score})
        if score > self.score:
            self.score, self.bad_evals = score, 0
            self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            self.bad_evals += 1
            if self.bad_evals >= self.patience:
                self.stopped = True


def clone_model(model: nn.Module) -> nn.Module:
    """A deep copy (the base model is shared by every cell of a (task, seed) and must stay untouched)."""
    return copy.deepcopy(model)
