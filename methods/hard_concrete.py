"""The hard-concrete gate of Louizos, Welling, Kingma ("Learning Sparse Neural Networks through L0
Regularization", ICLR 2018) as Voita et al. (ACL 2019, §6) gate attention heads, written from the official code
(lena-voita/the-story-of-heads, ``lib/layers/concrete_gate.py``; read through shared/reference/methods.md §5):
sampling, the deterministic test-time gate, the L0 penalty, the levels at which a selection prunes, and how far a
gate can move in a number of optimiser steps. The method that trains the gates is :mod:`headprune_bench.methods.voita`, which
re-exports every name here.
"""
from __future__ import annotations

import math

import torch

from headprune_bench.methods.base import lowest_k_mask

SELECTIONS = ("closed", "threshold", "topk")
REDUCTIONS = ("sum", "mean")



def hard_concrete(log_a: torch.Tensor, u: torch.Tensor, beta: float = 0.33, gamma: float = -0.1,
                  zeta: float = 1.1) -> torch.Tensor:
    """Training gate from uniform noise ``u`` (Louizos et al. 2018; official ``get_gates(True)``).

    ``g = clip(sigmoid((log u - log(1-u) + log_a) / beta) * (zeta - gamma) + gamma, 0, 1)``; differentiable in
    ``log_a`` (zero gradient where clipped). Shapes broadcast.
    """
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_a) / beta)
    return torch.clamp(s * (zeta - gamma) + gamma, 0.0, 1.0)


def sample_gates(log_a: torch.Tensor, generator: torch.Generator, beta: float = 0.33, gamma: float = -0.1,
                 zeta: float = 1.1, eps: float = 1e-6, num_samples: int | None = None) -> torch.Tensor:
    """Draw training gates: ``u ~ U(eps, 1 - eps)`` from the CPU ``generator``, then :func:`hard_concrete`.

    Args:
        log_a: ``[L, H]`` (or any shape) gate parameters.
        num_samples: if given, ``num_samples`` independent draws stacked in a leading dimension (for tests).

    Returns:
        gates with the shape of ``log_a`` (or ``[num_samples, *log_a.shape]``), on ``log_a``'s device.
    """
    shape = tuple(log_a.shape) if num_samples is None else (num_samples, *log_a.shape)
    u = torch.rand(shape, generator=generator, dtype=torch.float64) * (1 - 2 * eps) + eps
    return hard_concrete(log_a, u.to(device=log_a.device, dtype=log_a.dtype), beta, gamma, zeta)


def deterministic_gates(log_a: torch.Tensor, gamma: float = -0.1, zeta: float = 1.1) -> torch.Tensor:
    """Test-time gate ``clip(sigmoid(log_a) * (zeta - gamma) + gamma, 0, 1)`` (official ``get_gates(False)``).

    It is exactly 0 iff ``sigmoid(log_a) <= -gamma / (zeta - gamma)`` (1/12 with the defaults) and may be
    fractional in between.
    """
    return torch.clamp(torch.sigmoid(log_a) * (zeta - gamma) + gamma, 0.0, 1.0)


def prob_open(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1,
              eps: float = 1e-6) -> torch.Tensor:
    """``P(g > 0) = sigmoid(log_a - beta * log(-gamma / zeta))`` clipped to ``[eps, 1 - eps]`` (official
    ``get_penalty``).

    Raises:
        ValueError: ``gamma >= 0`` (the probability of a closed gate needs a negative lower stretch limit).
    """
    if gamma >= 0:
        raise ValueError(f"voita: the L0 penalty needs gamma < 0, got {gamma}")
    p = torch.sigmoid(log_a - beta * math.log(-gamma / zeta))
    return torch.clamp(p, eps, 1.0 - eps)


def prob_fully_open(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1) -> torch.Tensor:
    """``P(g = 1) = sigmoid(log_a - beta * log((1 - gamma) / (zeta - 1)))``: the mass clipped at the upper bound
    (same derivation as :func:`prob_open`; used by the tests of the sampler)."""
    return torch.sigmoid(log_a - beta * math.log((1 - gamma) / (zeta - 1)))


def l0_penalty(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1, eps: float = 1e-6,
               reduction: str = "sum") -> torch.Tensor:
    """Expected number of open gates of an ``[L, H]`` ``log_a``: summed over every head (``"sum"``, the BERT port)
    or per-layer sums averaged over layers (``"mean"``, the official TF code).

    Raises:
        ValueError: unknown reduction.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"voita: penalty_reduction must be one of {REDUCTIONS}, got {reduction!r}")
    per_layer = prob_open(log_a, beta, gamma, zeta, eps).sum(dim=-1)
    return per_layer.sum() if reduction == "sum" else per_layer.mean()


def close_threshold(gamma: float = -0.1, zeta: float = 1.1) -> float:
    """The ``log_a`` at and below which the deterministic gate is exactly 0: ``logit(-gamma / (zeta - gamma)) =
    log(-gamma / zeta)`` (-2.398 with the defaults)."""
    return math.log(-gamma / zeta)


def max_travel(gate_lr: float, steps: int, linear_decay: bool = True, taken: int | None = None) -> float:
    """How far (in ``log_a`` units) a gate can move in the first ``taken`` (default: all) of ``steps`` AdamW steps:
    the sum of those steps' learning rates, ``gate_lr * sum_{t < taken} (1 - t / steps)`` with linear decay
    (``gate_lr * (steps + 1) / 2`` for all steps), ``gate_lr * taken`` without. Adam moves a parameter whose
    gradient keeps its sign by about ``lr`` per step whatever the gradient's size, so this is the distance a gate
    travels when both the task loss and the penalty push it one way; an estimate (a bias-corrected Adam step can
    exceed ``lr`` when gradients shrink), used to warn when the step budget, not lambda, decides which gates can
    close."""
    n = steps if taken is None else min(int(taken), steps)
    if steps <= 0 or n <= 0:
        return 0.0
    if not linear_decay:
        return float(gate_lr) * n
    return float(gate_lr) * sum(1.0 - t / steps for t in range(n))


def prune_threshold(selection: str, gamma: float = -0.1, zeta: float = 1.1) -> float | None:
    """The ``log_a`` at and below which ``selection`` prunes a head: ``"closed"`` (deterministic gate 0):
    :func:`close_threshold`; ``"threshold"`` (gate <= 0.5): ``log((0.5 - gamma) / (zeta - 0.5))`` (0 with the
    defaults); ``"topk"``: None (a rank, not a level)."""
    if selection == "closed":
        return close_threshold(gamma, zeta)
    if selection == "threshold":
        return math.log((0.5 - gamma) / (zeta - 0.5))
    return None


def select_heads(log_a: torch.Tensor, selection: str, target: int | None = None, gamma: float = -0.1,
                 zeta: float = 1.1) -> torch.Tensor:
    """Final ``[L, H]`` 0/1 mask (1 = keep) from trained gates.

    ``"closed"``: prune deterministic gates == 0; ``"threshold"``: prune deterministic gates <= 0.5 (keep > 0.5);
    ``"topk"``: prune the ``target`` heads of lowest ``log_a`` (ties by flat index).

    Raises:
        ValueError: unknown selection, or "topk" without a target.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"voita: selection must be one of {SELECTIONS}, got {selection!r}")
    log_a = log_a.detach().cpu().double()
    if selection == "topk":
        if target is None:
            raise ValueError("voita: selection 'topk' needs a budget (--budget heads:K, fraction:F or matched:M)")
        return lowest_k_mask(log_a, int(target))
    gates = deterministic_gates(log_a, gamma, zeta)
    keep = gates > 0 if selection == "closed" else gates > 0.5
    return keep.float()


def gate_counts(gates: torch.Tensor, mask: torch.Tensor) -> dict[str, int]:
    """How binary the final gates are, against the final ``[L, H]`` mask: ``fractional_gates`` (kept heads whose
    deterministic gate is strictly between 0 and 1: Voita's network scales them at test time, the 0/1 mask keeps
    them whole), ``kept_closed_gates`` (kept heads whose gate is 0) and ``pruned_open_gates`` (pruned heads whose
    gate is above 0; both only after a completion to exactly K)."""
    gates, keep = gates.detach().cpu().double(), mask.detach().cpu() > 0
    return {"fractional_gates": int(((gates > 0) & (gates < 1) & keep).sum()),
            "kept_closed_gates": int(((gates == 0) & keep).sum()),
            "pruned_open_gates": int(((gates > 0) & ~keep).sum())}
