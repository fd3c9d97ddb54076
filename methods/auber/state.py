"""AUBER's state of a layer: per-head norms of a projection weight, standardised, then softmax.

Paper (Lee, Lee, Kang, arXiv 2009.14409) §3.3: "We first calculate the L1 norm of the value matrix of each
attention head. Then, we standardize the norm values to have a mean 0 and a standard deviation 1. Finally, the
softmax function is applied to the norm values to yield s_l." Lemma 1 motivates the value matrix (it bounds the
head's output).

Official code (``src/lib/agent.py::get_state``, shared/reference/methods.md §1.1 step 4a): the rows
``W[d*i : d*(i+1), :]`` of the layer's value (or query/key) projection weight are flattened and passed to
``numpy.linalg.norm(., None)``, i.e. the Frobenius (= L2 of the flattened matrix) norm, NOT L1; then
``sklearn.preprocessing.StandardScaler`` (population standard deviation, ``ddof=0``; a zero deviation is
replaced by 1) and ``scipy.special.softmax`` over the heads.

Choices here:

* ``norm="l1"`` (default, the paper) is the entrywise L1 norm of the head's flattened weight block (the same
  flattening as the code, with ``ord=1``); ``norm="l2"`` is the code's Frobenius norm (the ``auber-l2``
  ablation of the paper's Table 3).
* ``source`` picks the projection: ``"value"`` (default), ``"query"``, ``"key"`` (``auber-query`` /
  ``auber-key``, Table 3).
* Computed in float64 and returned as float32, as the official code does (numpy float64 -> ``torch.Tensor``).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from headprune_bench.methods.heads import get_layout

SOURCES = ("value", "query", "key")
NORMS = ("l1", "l2")


def head_norms(weight: torch.Tensor, num_heads: int, norm: str = "l1") -> torch.Tensor:
    """Per-head norm of a projection weight ``[H*d, hidden]`` (rows ``d*i .. d*(i+1)-1`` belong to head i).

    Args:
        weight: the projection weight (``nn.Linear.weight``; output rows are head-major, as in BERT).
        num_heads: H.
        norm: ``"l1"`` (sum of absolute values of the flattened block) or ``"l2"`` (Frobenius).

    Returns:
        float64 ``[H]`` on the CPU.

    Raises:
        ValueError: unknown norm, or rows not divisible by H.
    """
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
    """z-scores across the entries, like ``sklearn.preprocessing.StandardScaler``: population std (``ddof=0``),
    and a variance within rounding error of zero gives a deviation of 1 (sklearn's ``_is_constant_feature`` and
    ``_handle_zeros_in_scale``), so equal norms give a uniform state."""
    values = values.to(torch.float64)
    n = values.numel()
    mean = values.mean()
    var = values.var(unbiased=False)
    eps = torch.finfo(torch.float64).eps
    # sklearn's _is_constant_feature: the variance is within its own rounding error of zero
    constant = float(var) <= n * eps * float(var) + (n * float(mean) * eps) ** 2
    std = torch.tensor(1.0, dtype=torch.float64) if constant or not math.isfinite(float(var)) else var.sqrt()
    return (values - mean) / std


def state_from_norms(norms: torch.Tensor) -> torch.Tensor:
    """``softmax(standardize(norms))`` as float32 ``[H]`` (sums to 1)."""
    return torch.softmax(standardize(norms), dim=0).to(torch.float32)


def layer_state(model: nn.Module, layer: int, source: str = "value", norm: str = "l1") -> torch.Tensor:
    """The initial state ``s_l`` of ``layer``: float32 ``[H]``, every entry > 0, summing to 1.

    Raises:
        ValueError: unknown ``source`` or ``norm``; a physically pruned layer (AUBER works on masks).
    """
    if source not in SOURCES:
        raise ValueError(f"auber: state must be one of {SOURCES}, got {source!r}")
    layout = get_layout(model)
    linear = {"value": layout.value, "query": layout.query, "key": layout.key}[source](layer)
    if linear.weight.shape[0] != layout.num_heads * layout.head_size:
        raise ValueError(f"auber: layer {layer} has physically removed heads; AUBER needs the unpruned model")
    return state_from_norms(head_norms(linear.weight, layout.num_heads, norm))
