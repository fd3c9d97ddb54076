"""AUBER's state of a layer: per-head norms of a projection weight, standardised, then softmax (paper §3.3;
snudatalab/AUBER ``src/lib/agent.py`` ``get_state``). See docs/methods.md ("AUBER (Lee et al. 2020)", "State")."""
from __future__ import annotations

import math

import torch
from torch import nn

from headprune_bench.methods.heads import get_layout

SOURCES = ("value", "query", "key")
NORMS = ("l1", "l2")


def head_norms(weight: torch.Tensor, num_heads: int, norm: str = "l1") -> torch.Tensor:
    """Per-head norm, float64 ``[H]`` on the CPU, of a projection weight ``[H*d, hidden]`` (rows ``d*i .. d*(i+1)-1``
    are head i): ``"l1"`` (entrywise, paper) or ``"l2"`` (Frobenius, official code) of the head's block.
    Raises ValueError: unknown norm, or rows not divisible by ``num_heads``."""
    if norm not in NORMS:
        raise ValueError(f"auber: norm must be one of {NORMS}, got {norm!r}")
    rows = weight.shape[0]
    if rows % num_heads:
        raise ValueError(f"auber: weight has {rows} rows, not a multiple of {num_heads} heads")
    blocks = weight.detach().to("cpu", torch.float64).reshape(num_heads, -1)
    if norm == "l1":
        return blocks.abs().sum(dim=1)
    return blocks.pow(2).sum(dim=1).sqrt()


def standardize(values: torch.Tensor) -> torch.Tensor:
    """z-scores as ``sklearn.preprocessing.StandardScaler`` (population std; a variance within rounding error of
    zero, sklearn's ``_is_constant_feature``, gives a deviation of 1: equal norms give a uniform state)."""
    values = values.to(torch.float64)
    n = values.numel()
    mean = values.mean()
    var = values.var(unbiased=False)
    eps = torch.finfo(torch.float64).eps
    constant = float(var) <= n * eps * float(var) + (n * float(mean) * eps) ** 2
    std = torch.tensor(1.0, dtype=torch.float64) if constant or not math.isfinite(float(var)) else var.sqrt()
    return (values - mean) / std


def state_from_norms(norms: torch.Tensor) -> torch.Tensor:
    """``softmax(standardize(norms))`` as float32 ``[H]`` (sums to 1)."""
    return torch.softmax(standardize(norms), dim=0).to(torch.float32)


def layer_state(model: nn.Module, layer: int, source: str = "value", norm: str = "l1") -> torch.Tensor:
    """The initial state ``s_l`` of ``layer``: float32 ``[H]``, every entry > 0, summing to 1. Raises ValueError:
    unknown ``source`` or ``norm``; a layer with physically removed heads."""
    if source not in SOURCES:
        raise ValueError(f"auber: state must be one of {SOURCES}, got {source!r}")
    layout = get_layout(model)
    linear = {"value": layout.value, "query": layout.query, "key": layout.key}[source](layer)
    if linear.weight.shape[0] != layout.num_heads * layout.head_size:
        raise ValueError(f"auber: layer {layer} has physically removed heads; AUBER needs the unpruned model")
    return state_from_norms(head_norms(linear.weight, layout.num_heads, norm))
