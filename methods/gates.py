"""The gate-training loop shared by the methods that learn head gates by gradient descent (Voita, DSP).

Both methods train a tensor of per-head gate parameters (Voita: hard-concrete ``log_a``, :mod:`headprune_bench.methods.voita`;
DSP: subset logits ``w``, :mod:`headprune_bench.methods.dsp`) on a deep copy of the fine-tuned model, with the same recipe: the
HF Trainer defaults that both official codes run on (shared/reference/methods.md §5, §6), written once here:

* AdamW (betas 0.9/0.999, eps 1e-8) with the gates in their own group (``gate_lr``, no weight decay) and, when
  the model trains too, its parameters in a second group (``lr``, ``weight_decay``);
* every learning rate decays linearly to 0 over the run's steps, without warm-up (or stays constant);
* gradient-norm clipping over the gates and every trained parameter (``max_grad_norm``; 0 = none);
* train mode (dropout on) under a seeded torch RNG, restored afterwards (:func:`headprune_bench.methods.base.seeded_torch_rng`);
* ``mini_train`` batches reshuffled every epoch with a seed derived from ``context.seed``;
* per step: a head mask from the caller's sampler, a masked forward (:func:`headprune_bench.methods.heads.apply_head_mask`), the
  mean cross-entropy of the labels, the caller's objective, backward, clipping, optimiser and schedule steps, then
  the caller's step callback (logging; early stopping with :class:`EarlyStopping`, which keeps the best state).

What differs between the methods stays in their own files: how the mask is drawn from the gates (the caller's
``sample_mask``), the objective (``objective``: Voita adds lambda times the L0 penalty), and what happens after a
step (``on_step``: Voita's early stopping on mini_dev, DSP's loss curve). The loop adds no randomness of its own:
every draw is the caller's (gate noise from the caller's generator) or seeded by :class:`GateRecipe`.
"""
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
    """Optimisation settings of one gate-training run (see the module docstring for their sources).

    Attributes:
        batch_size: ``mini_train`` examples per step.
        total_steps: optimiser steps of the run, >= 1 (from :func:`plan_steps`).
        gate_lr: AdamW learning rate of the gate parameters (no weight decay).
        lr: AdamW learning rate of the model's parameters, when they train.
        weight_decay: AdamW weight decay of the model's parameters.
        max_grad_norm: clip the global L2 gradient norm of gates + trained parameters to this (0 = no clipping).
        linear_decay: every learning rate is multiplied by ``max(0, 1 - t / total_steps)`` after ``t`` steps
            (no warm-up); False = constant.
        torch_seed: seed of torch's global RNG (dropout) for the run.
        order_offset: the batch order of epoch ``e`` is shuffled with seed ``context.seed * 1000 + e + order_offset``.
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
    """What the loop hands to ``on_step`` after each optimiser step.

    Attributes:
        step: optimiser steps done so far (1 after the first).
        ce: scalar tensor, mean cross-entropy (nats per example) of the step's batch under the sampled mask.
        loss: scalar tensor, the objective that was minimised (``ce`` when the caller gave no objective).
        heads: the :class:`~headprune_bench.methods.heads.HeadMask` on the trained model, so a callback can evaluate it with other
            gates (e.g. deterministic ones); the next step sets its own sampled mask again.
    """

    step: int
    ce: torch.Tensor
    loss: torch.Tensor
    heads: HeadMask


@dataclass
class GateRun:
    """How a run ended. Attributes: ``steps`` (optimiser steps taken), ``stopped_early`` (``on_step`` asked to
    stop before ``total_steps``)."""

    steps: int
    stopped_early: bool


class EarlyStopping:
    """Early-stopping bookkeeping, an ``on_step`` callback of :func:`run_gate_training` (the criterion is the
    caller's; Voita's is its mini_dev objective, :func:`headprune_bench.methods.voita.dev_objective`).

    Every ``every`` steps and at the last step it calls ``evaluate(info) -> dict`` (which must hold
    ``"objective"``, lower = better), appends ``{"step", "train_ce", **evaluate's values}`` (rounded to 6 digits) to
    :attr:`history` and, on a new best objective, copies the gates (and, with ``keep_model``, the model's state
    dict); it asks the loop to stop after ``patience`` evaluations in a row without improvement. :meth:`restore`
    puts the best state back.

    With ``eligible`` (a predicate on ``evaluate``'s values, e.g. Voita's "the gates are nearly binary"), only an
    eligible evaluation can stop the loop or count towards ``patience``, and the first eligible state replaces any
    ineligible best; until one is seen, the best ineligible state is kept (so :meth:`restore` always has one).

    Attributes:
        history: the evaluations, in order.
        best_objective: the objective of the kept state (``inf`` before any evaluation); ``best_step``: its step;
        best_eligible: whether the kept state is eligible (always True without ``eligible``, once one is kept).
        best_state: ``{"gates": tensor, "model": state dict or None}``, ``None`` until an evaluation ran.
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
        """Copy the best state back into the gates (and the model with ``keep_model``); nothing without an
        evaluation."""
        if self.best_state is None:
            return
        with torch.no_grad():
            self.gates.copy_(self.best_state["gates"])
        if self.best_state["model"] is not None:
            self.work.load_state_dict(self.best_state["model"])


def plan_steps(context: PruningContext, batch_size: int, epochs: float, max_steps: int,
               method: str) -> tuple[int, int]:
    """Steps of a run over ``mini_train``: ``(steps_per_epoch, total_steps)``.

    ``steps_per_epoch = ceil(N / batch_size)`` for ``N`` mini_train examples; ``total_steps = max(1,
    round(epochs * steps_per_epoch))``, capped at ``max_steps`` when ``max_steps > 0``.

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
    """A deep copy of ``model`` (the base model stays untouched); with ``train_model=False`` every parameter of the
    copy is frozen, so only the gates train. :func:`run_gate_training` unfreezes them again at the end."""
    work = copy.deepcopy(model)
    if not train_model:
        for p in work.parameters():
            p.requires_grad_(False)
    return work


def _optimizer(gates: torch.Tensor, model_params: list[torch.Tensor],
               recipe: GateRecipe) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with the gate group first, then the model group when it has parameters; its linear-decay schedule."""
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
    """Train ``gates`` (and the parameters of ``work`` that require grad) for ``recipe.total_steps`` steps.

    Args:
        work: the model to train through its head mask (from :func:`trainable_copy`); a classifier of a supported family (headprune_bench.methods.heads.families).
            Left in eval mode with every parameter requiring grad, hooks removed, also on error.
        context: gives the ``mini_train`` batches, the seed and ``count_backward``.
        gates: leaf tensor of gate parameters (``requires_grad=True``, any shape and dtype), on ``work``'s device.
        recipe: the optimisation settings.
        sample_mask: ``sample_mask(t) -> [L, H]`` head mask for step ``t`` (0-based), differentiable in ``gates``
            (the method's relaxation; any noise comes from the caller's own generator).
        objective: ``objective(ce) -> loss`` from the batch's mean cross-entropy; ``None`` = the cross-entropy.
        on_step: called after every optimiser step with a :class:`GateStep`; returning True stops the run.

    Returns:
        :class:`GateRun` (steps taken, whether ``on_step`` stopped the run).

    Raises:
        ValueError: a mask of the wrong shape from ``sample_mask`` (:func:`headprune_bench.methods.heads.apply_head_mask`).
    """
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
                    ce = F.cross_entropy(work(**model_inputs(batch)).logits.float(), batch["labels"])
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
