"""The hard-concrete gate (Louizos, Welling, Kingma, ICLR 2018) as Voita et al. (ACL 2019, §6) gate heads;
the-story-of-heads ``lib/layers/concrete_gate.py``. See docs/heads.md ("Hard-concrete gates")."""
from __future__ import annotations

import math

import torch

from headprune_bench.methods.base import lowest_k_mask

SELECTIONS = ("closed", "threshold", "topk")
REDUCTIONS = ("sum", "mean")


def hard_concrete(log_a: torch.Tensor, u: torch.Tensor, beta: float = 0.33, gamma: float = -0.1,
                  zeta: float = 1.1) -> torch.Tensor:
    """Training gate ``clip(sigmoid((log u - log(1-u) + log_a) / beta) * (zeta - gamma) + gamma, 0, 1)`` from
    uniform noise ``u`` (shapes broadcast; official ``get_gates(True)``)."""
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_a) / beta)
    return torch.clamp(s * (zeta - gamma) + gamma, 0.0, 1.0)


def sample_gates(log_a: torch.Tensor, generator: torch.Generator, beta: float = 0.33, gamma: float = -0.1,
                 zeta: float = 1.1, eps: float = 1e-6, num_samples: int | None = None) -> torch.Tensor:
    """Training gates of ``log_a`` (``[L, H]`` or any shape) from ``u ~ U(eps, 1 - eps)`` drawn by the CPU
    ``generator``; shape of ``log_a``, or ``[num_samples, *log_a.shape]``, on ``log_a``'s device."""
    shape = tuple(log_a.shape) if num_samples is None else (num_samples, *log_a.shape)
    u = torch.rand(shape, generator=generator, dtype=torch.float64) * (1 - 2 * eps) + eps
    return hard_concrete(log_a, u.to(device=log_a.device, dtype=log_a.dtype), beta, gamma, zeta)


def deterministic_gates(log_a: torch.Tensor, gamma: float = -0.1, zeta: float = 1.1) -> torch.Tensor:
    """Test-time gate ``clip(sigmoid(log_a) * (zeta - gamma) + gamma, 0, 1)`` (official ``get_gates(False)``)."""
    return torch.clamp(torch.sigmoid(log_a) * (zeta - gamma) + gamma, 0.0, 1.0)


def prob_open(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1,
              eps: float = 1e-6) -> torch.Tensor:
    """``P(g > 0) = sigmoid(log_a - beta * log(-gamma / zeta))`` in ``[eps, 1 - eps]`` (official ``get_penalty``);
    ValueError if ``gamma >= 0``."""
    if gamma >= 0:
        raise ValueError(f"voita: the L0 penalty needs gamma < 0, got {gamma}")
    p = torch.sigmoid(log_a - beta * math.log(-gamma / zeta))
    return torch.clamp(p, eps, 1.0 - eps)


def prob_fully_open(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1) -> torch.Tensor:
    """``P(g = 1) = sigmoid(log_a - beta * log((1 - gamma) / (zeta - 1)))``."""
    return torch.sigmoid(log_a - beta * math.log((1 - gamma) / (zeta - 1)))


def l0_penalty(log_a: torch.Tensor, beta: float = 0.33, gamma: float = -0.1, zeta: float = 1.1, eps: float = 1e-6,
               reduction: str = "sum") -> torch.Tensor:
    """Expected open gates of ``[L, H]`` ``log_a``: over every head (``"sum"``, the BERT port) or the mean of the
    per-layer sums (``"mean"``, the official TF code). Raises ValueError: unknown reduction."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"voita: penalty_reduction must be one of {REDUCTIONS}, got {reduction!r}")
    per_layer = prob_open(log_a, beta, gamma, zeta, eps).sum(dim=-1)
    return per_layer.sum() if reduction == "sum" else per_layer.mean()


def close_threshold(gamma: float = -0.1, zeta: float = 1.1) -> float:
    """The ``log_a`` at and below which the deterministic gate is 0: ``log(-gamma / zeta)`` (-2.398 by default)."""
    return math.log(-gamma / zeta)


def max_travel(gate_lr: float, steps: int, linear_decay: bool = True, taken: int | None = None) -> float:
    """Estimated ``log_a`` distance a gate moves in the first ``taken`` (default all) of ``steps`` AdamW steps: the
    sum of their learning rates, ``gate_lr * sum_{t < taken} (1 - t / steps)`` (linear decay) or ``gate_lr * taken``
    (docs/heads.md, "Hard-concrete gates")."""
    n = steps if taken is None else min(int(taken), steps)
    if steps <= 0 or n <= 0:
        return 0.0
    if not linear_decay:
        return float(gate_lr) * n
    return float(gate_lr) * sum(1.0 - t / steps for t in range(n))


def prune_threshold(selection: str, gamma: float = -0.1, zeta: float = 1.1) -> float | None:
    """The ``log_a`` at and below which ``selection`` prunes: ``"closed"``: :func:`close_threshold`;
    ``"threshold"`` (gate <= 0.5): ``log((0.5 - gamma) / (zeta - 0.5))``; ``"topk"``: None."""
    if selection == "closed":
        return close_threshold(gamma, zeta)
    if selection == "threshold":
        return math.log((0.5 - gamma) / (zeta - 0.5))
    return None


def select_heads(log_a: torch.Tensor, selection: str, target: int | None = None, gamma: float = -0.1,
                 zeta: float = 1.1) -> torch.Tensor:
    """Final ``[L, H]`` 0/1 mask (1 = keep): prune deterministic gates == 0 (``"closed"``), <= 0.5
    (``"threshold"``), or the ``target`` heads of lowest ``log_a`` (``"topk"``, ties by flat index).

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
    """Counts of ``[L, H]`` deterministic ``gates`` against ``mask``: ``fractional_gates`` (kept, 0 < g < 1),
    ``kept_closed_gates`` (kept, g = 0), ``pruned_open_gates`` (pruned, g > 0)."""
    gates, keep = gates.detach().cpu().double(), mask.detach().cpu() > 0
    return {"fractional_gates": int(((gates > 0) & (gates < 1) & keep).sum()),
            "kept_closed_gates": int(((gates == 0) & keep).sum()),
            "pruned_open_gates": int(((gates > 0) & ~keep).sum())}
