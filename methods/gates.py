"""The gate-training loop shared by the methods that learn head gates by gradient descent (Voita, DSP).
See docs/heads.md ("Gate training")."""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from headprune_bench.methods.base import PruningContext, model_inputs, seeded_torch_rng
from headprune_bench.methods.heads import HeadMask, apply_head_mask

__all__ = ["GateRecipe", "GateStep", "GateRun", "EarlyStopping", "plan_steps", "trainable_copy", "run_gate_training"]


@dataclass(frozen=True)
class GateRecipe:
    """Optimisation settings of one gate-training run (docs/heads.md, "Gate training").

    Attributes:
        batch_size: ``mini_train`` examples per step. total_steps: optimiser steps, >= 1 (:func:`plan_steps`).
        gate_lr: AdamW rate of the gates (no decay). lr, weight_decay: those of the model's trained parameters.
        max_grad_norm: global L2 gradient-norm clip over gates + trained parameters (0 = none).
        linear_decay: learning rates times ``max(0, 1 - t / total_steps)`` after ``t`` steps; False = constant.
        torch_seed: seed of torch's global RNG (dropout).
        order_offset: epoch ``e`` is shuffled with seed ``context.seed * 1000 + e + order_offset``.
    """

    batch_size: int
    total_steps: int
    gate_lr: float
    lr: float
    weight_decay: float
    max_grad_norm: float
    linear_decay: bool
    torch_seed: int
    order_offset: int = 0


@dataclass
class GateStep:
    """What ``on_step`` gets after each optimiser step: ``step`` (1 after the first), ``ce`` (scalar, mean
    cross-entropy in nats per example under the sampled mask), ``loss`` (scalar objective) and ``heads`` (the
    :class:`~headprune_bench.methods.heads.HeadMask` on the model, whose mask a callback may change)."""

    step: int
    ce: torch.Tensor
    loss: torch.Tensor
    heads: HeadMask


@dataclass
class GateRun:
    """How a run ended: ``steps`` taken, ``stopped_early`` (``on_step`` stopped it)."""

    steps: int
    stopped_early: bool


class EarlyStopping:
    """Early stopping as an ``on_step`` callback of :func:`run_gate_training` (rules: docs/heads.md, "Gate training").

    Every ``every`` steps and at the last it calls ``evaluate(info) -> dict`` (``"objective"``: lower = better),
    appends to :attr:`history`, keeps the best gates (and model with ``keep_model``) in :attr:`best_state` (with
    ``best_objective``, ``best_step``, ``best_eligible``), and stops after ``patience`` evaluations without
    improvement (with ``eligible``: eligible ones only).
    """

    def __init__(self, work: nn.Module, gates: torch.Tensor, evaluate: Callable[[GateStep], dict[str, float]], *,
                 every: int, total_steps: int, patience: int, keep_model: bool,
                 eligible: Callable[[dict[str, float]], bool] | None = None) -> None:
        self.work, self.gates, self.evaluate, self.eligible = work, gates, evaluate, eligible
        self.every, self.total_steps, self.patience, self.keep_model = every, total_steps, patience, keep_model
        self.history: list[dict[str, float]] = []
        self.best_objective, self.best_state, self.best_step, self.bad = math.inf, None, 0, 0
        self.best_eligible = False

    def __call__(self, info: GateStep) -> bool:
        if info.step % self.every != 0 and info.step != self.total_steps:
            return False
        values = self.evaluate(info)
        self.history.append({"step": info.step, "train_ce": round(info.ce.item(), 6),
                             **{k: round(v, 6) for k, v in values.items()}})
        better = values["objective"] < self.best_objective
        if self.eligible is not None and not self.eligible(values):
            if not self.best_eligible and better:
                self._keep(values["objective"], info.step, eligible=False)
            return False  # an ineligible state never stops the loop
        if better or (self.best_state is not None and not self.best_eligible):
            self._keep(values["objective"], info.step, eligible=True)
            return False
        self.bad += 1
        return self.bad >= self.patience

    def _keep(self, objective: float, step: int, *, eligible: bool) -> None:
        self.best_objective, self.best_step, self.best_eligible, self.bad = objective, step, eligible, 0
        model = {k: v.detach().clone() for k, v in self.work.state_dict().items()} if self.keep_model else None
        self.best_state = {"gates": self.gates.detach().clone(), "model": model}

    def restore(self) -> None:
        """Copy the best state back into the gates (and the model); nothing before an evaluation."""
        if self.best_state is None:
            return
        with torch.no_grad():
            self.gates.copy_(self.best_state["gates"])
        if self.best_state["model"] is not None:
            self.work.load_state_dict(self.best_state["model"])


def plan_steps(context: PruningContext, batch_size: int, epochs: float, max_steps: int,
               method: str) -> tuple[int, int]:
    """``(steps_per_epoch, total_steps)`` over ``mini_train``: ``ceil(N / batch_size)`` and ``max(1, round(epochs *
    steps_per_epoch))``, capped at ``max_steps`` when > 0.

    Raises:
        ValueError: ``mini_train`` is empty (the message starts with ``method``).
    """
    n_train = context.num_examples("mini_train")
    if n_train == 0:
        raise ValueError(f"{method}: mini_train is empty")
    steps_per_epoch = math.ceil(n_train / batch_size)
    total = max(1, int(round(epochs * steps_per_epoch)))
    if max_steps > 0:
        total = min(total, max_steps)
    return steps_per_epoch, total


def trainable_copy(model: nn.Module, train_model: bool) -> nn.Module:
    """A deep copy of ``model``, every parameter frozen unless ``train_model`` (:func:`run_gate_training` unfreezes)."""
    work = copy.deepcopy(model)
    if not train_model:
        for p in work.parameters():
            p.requires_grad_(False)
    return work


def _optimizer(gates: torch.Tensor, model_params: list[torch.Tensor],
               recipe: GateRecipe) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (gate group, then model group if any) and its schedule."""
    groups = [{"params": [gates], "lr": recipe.gate_lr, "weight_decay": 0.0}]
    if model_params:
        groups.append({"params": model_params, "lr": recipe.lr, "weight_decay": recipe.weight_decay})
    optimizer = torch.optim.AdamW(groups, betas=(0.9, 0.999), eps=1e-8)
    total = recipe.total_steps
    decay = (lambda step: max(0.0, 1.0 - step / total)) if recipe.linear_decay else (lambda step: 1.0)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, decay)


def run_gate_training(work: nn.Module, context: PruningContext, gates: torch.Tensor, recipe: GateRecipe,
                      sample_mask: Callable[[int], torch.Tensor],
                      objective: Callable[[torch.Tensor], torch.Tensor] | None = None,
                      on_step: Callable[[GateStep], bool] | None = None) -> GateRun:
    """Train ``gates`` and the parameters of ``work`` that require grad for ``recipe.total_steps`` steps.

    Args:
        work: a classifier of a supported family (:func:`trainable_copy`); left in eval mode, every parameter
            requiring grad, hooks removed, also on error.
        context: the ``mini_train`` batches, the seed, ``count_backward``, ``autocast`` (the forward passes).
        gates: leaf tensor of gate parameters (``requires_grad=True``, any shape), on ``work``'s device.
        recipe: the settings. sample_mask: ``sample_mask(t) -> [L, H]`` for step ``t`` (0-based), differentiable.
        objective: ``objective(ce) -> loss``; ``None`` = the cross-entropy.
        on_step: called with a :class:`GateStep` after every step; True stops the run.

    Returns :class:`GateRun`. Raises ValueError: ``sample_mask`` returns a mask of the wrong shape."""
    device = next(work.parameters()).device
    model_params = [p for p in work.parameters() if p.requires_grad]
    optimizer, scheduler = _optimizer(gates, model_params, recipe)
    step = epoch = 0
    stopped = False
    handle = apply_head_mask(work, torch.ones(context.num_layers, context.num_heads, device=device))
    try:
        with seeded_torch_rng(recipe.torch_seed, device):
            work.train()
            while step < recipe.total_steps and not stopped:
                for batch in context.batches("mini_train", batch_size=recipe.batch_size, shuffle=True,
                                             seed=int(context.seed) * 1_000 + epoch + recipe.order_offset):
                    handle.set_mask(sample_mask(step))
                    with context.autocast():  # (bf16 under --precision bf16; the loss and backward in float32)
                        logits = work(**model_inputs(batch)).logits
                    ce = F.cross_entropy(logits.float(), batch["labels"])
                    loss = ce if objective is None else objective(ce)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    context.count_backward(int(batch["labels"].shape[0]))
                    if recipe.max_grad_norm > 0:
                        torch.nn.utils.clip_grad_norm_([gates, *model_params], recipe.max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    step += 1
                    if on_step is not None and on_step(GateStep(step, ce, loss, handle)):
                        stopped = True
                    if step >= recipe.total_steps or stopped:
                        break
                epoch += 1
    finally:
        handle.remove()
        for p in work.parameters():
            p.requires_grad_(True)
        work.eval()
    return GateRun(steps=step, stopped_early=stopped)
