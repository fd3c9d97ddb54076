"""Gradient head importance (Michel, Levy, Neubig, "Are Sixteen Heads Really Better than One?", NeurIPS 2019):
``I_h = E_x |dL(x)/d xi_h|`` (§4.1, Eq. 2), heads pruned in increasing order (§4.2). See docs/methods.md
("Michel et al. 2019")."""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn

from headprune_bench.methods.base import (
    SPLITS,
    HeadPruner,
    PruningContext,
    PruningResult,
    autograd_batch,
    autograd_enabled,
    lowest_k_mask,
    model_inputs,
)
from headprune_bench.methods.heads import apply_head_mask
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register

ESTIMATORS = ("example", "token")
MODES = ("one-shot", "iterative")


def head_importance(model: nn.Module, batches, num_layers: int, num_heads: int, *, estimator: str = "example",
                    base_mask: torch.Tensor | None = None, max_examples: int = 0,
                    autocast=contextlib.nullcontext) -> tuple[torch.Tensor, int]:
    """The importance ``E_x |dL(x)/dxi_h|`` of every head (§4.1, Eq. 2; official fork of pytorch-pretrained-BERT,
    ``examples/classifier_eval.py`` ``calculate_head_importance``), L = summed cross-entropy of the labels.

    Args:
        model: a classifier of a supported family, in eval mode (the caller's); its weights get no gradient.
            Gradients are enabled inside, so a caller's ``torch.no_grad()`` or ``inference_mode()`` does not matter.
        batches: batches with ``input_ids``, ``attention_mask``, ``token_type_ids``, ``labels``.
        estimator: "example" (``|.|`` per example, the paper) or "token" (per token position, the official code).
        base_mask: optional ``[L, H]`` 0/1 mask of heads already pruned; the gates are multiplied by it.
        max_examples: stop after this many examples (0 = all).
        autocast: the forward passes' context (``PruningContext.autocast``: bf16 under ``--precision bf16``); the
            loss, the gradient and the sums stay in float32/float64.

    Returns:
        (``[L, H]`` float64 importance, not normalised; number of examples used).

    Raises:
        ValueError: unknown estimator, or no examples.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"michel: estimator must be one of {ESTIMATORS}, got {estimator!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    total = torch.zeros(num_layers, num_heads, dtype=torch.float64)
    n_examples = n_tokens = 0
    try:
        for batch in batches:
            if max_examples and n_examples >= max_examples:
                break
            if max_examples:
                batch = {k: v[: max_examples - n_examples] for k, v in batch.items()}
            batch = autograd_batch(batch)
            bsz, seq = batch["input_ids"].shape
            device = batch["input_ids"].device
            shape = (bsz, num_layers, num_heads) if estimator == "example" else (bsz, seq, num_layers, num_heads)
            with autograd_enabled():
                gates = torch.ones(shape, device=device, requires_grad=True)
                effective = gates if base_mask is None else gates * base_mask.to(device)
                with apply_head_mask(model, effective), autocast():
                    logits = model(**model_inputs(batch)).logits
                loss = F.cross_entropy(logits.float(), batch["labels"], reduction="sum")  # sum of per-example L(x)
                (grad,) = torch.autograd.grad(loss, gates)
            grad = grad.abs().double().cpu()
            if estimator == "example":
                total += grad.sum(dim=0)
            else:
                total += grad.sum(dim=(0, 1))
                n_tokens += int(batch["attention_mask"].sum())
            n_examples += bsz
    finally:
        for p in params:
            p.requires_grad_(True)
    if n_examples == 0:
        raise ValueError("michel: the importance split gave no examples")
    if estimator == "example":
        return total / n_examples, n_examples
    importance = total / n_tokens
    importance[-1] = total[-1] / n_examples  # official normalisation of the last layer (issue #11)
    return importance, n_examples


def normalize_by_layer(importance: torch.Tensor) -> torch.Tensor:
    """Divide each layer's row by its L2 norm (Michel et al. §4.1; official ``+1e-20`` guard). ``[L, H]``."""
    return importance / (importance.pow(2).sum(dim=-1, keepdim=True).sqrt() + 1e-20)


@register
class MichelPruner(HeadPruner):
    """Prune the heads of lowest gradient importance (Michel et al. 2019, Eq. 2, §4.2).

    Options: estimator (str, "example" or "token"); normalize_by_layer (bool, True): per-layer L2 norm (§4.1);
    mode (str, "one-shot" or "iterative": recompute on the masked model every ``step_fraction`` (0.1) of all
    heads); split (str, "mini_train"); max_examples (int, 0 = all); batch_size (int, 32); min_heads_per_layer
    (int, 0). ``scores`` = the last pass's ``[L, H]`` importance (float64 in one-shot mode, as ranked). Raises
    OptionError at construction.
    Precision: the forward passes under ``context.autocast`` (bf16 under ``--precision bf16``); the loss and the
    gradients in float32, their sums in float64.
    """

    name = "michel"
    report_order, report_color = 30, "#56B4E9"
    constraints = {"estimator": ESTIMATORS, "mode": MODES, "split": SPLITS,
                   "step_fraction": Interval(0, 1, closed="right"), "max_examples": Interval(0, None),
                   "batch_size": Interval(1, None), "min_heads_per_layer": Interval(0, None)}
    summary = "Michel et al. 2019: prune heads with the lowest E|dL/d gate| (one-shot or iterative)"
    defaults = {"estimator": "example", "normalize_by_layer": True, "mode": "one-shot", "step_fraction": 0.1,
                "split": "mini_train", "max_examples": 0, "batch_size": 32, "min_heads_per_layer": 0}

    def ranks_once(self) -> bool:
        """True in one-shot mode (one importance pass); iterative passes depend on the target."""
        return self.options["mode"] == "one-shot"

    def mask_at(self, result: PruningResult, target_heads: int) -> PruningResult:
        """The one-shot mask at ``target_heads`` from ``result``'s importance scores."""
        derived = super().mask_at(result, target_heads)
        derived.trace = {**derived.trace, "steps": [int(target_heads)]}
        return derived

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """One-shot or iterative (official ``--exact_pruning``) pruning by :func:`head_importance`; weights untouched.

        Raises:
            ValueError: no target, or the split gave no examples.
        """
        opts = self.options
        if context.target_heads is None:
            raise ValueError("method 'michel' needs a budget: give --budget heads:K, fraction:F or matched:METHOD")
        target = int(context.target_heads)
        model.eval()

        def scores_for(mask: torch.Tensor | None) -> torch.Tensor:
            batches = context.batches(opts["split"], batch_size=opts["batch_size"])
            imp, n = head_importance(model, batches, context.num_layers, context.num_heads,
                                     estimator=opts["estimator"], base_mask=mask, max_examples=opts["max_examples"],
                                     autocast=context.autocast)
            context.count_backward(n)
            return normalize_by_layer(imp) if opts["normalize_by_layer"] else imp

        mask = torch.ones(context.num_layers, context.num_heads)
        if opts["mode"] == "one-shot" or target == 0:
            scores = scores_for(None)  # float64, as ranked: mask_at ranks the very same values
            mask = lowest_k_mask(scores, target, opts["min_heads_per_layer"])
            return PruningResult(mask=mask, scores=scores, trace={"steps": [target]})
        step = max(1, math.ceil(opts["step_fraction"] * context.total_heads))
        steps = []
        scores = None
        while int((mask == 0).sum()) < target:
            scores = scores_for(mask)
            goal = min(target, int((mask == 0).sum()) + step)
            mask = lowest_k_mask(scores, goal, opts["min_heads_per_layer"], already_pruned=mask)
            steps.append(goal)
            context.log(f"michel: iterative step -> {goal} heads pruned")
        return PruningResult(mask=mask, scores=scores.float(), trace={"steps": steps})
