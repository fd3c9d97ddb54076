"""Reading attention maps out of an encoder of any supported family (for confidence and redundancy scores).

The SDPA kernel returns no attention weights, so :func:`eager_attention` switches the model to the eager
implementation for the duration of a block (``PreTrainedModel.set_attn_implementation``) and restores it after.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from headprune_bench.methods.base import model_inputs


@contextlib.contextmanager
def eager_attention(model: nn.Module) -> Iterator[nn.Module]:
    """Run a block with ``attn_implementation="eager"`` (needed for ``output_attentions=True``); restores the
    previous implementation on exit, also on error.

    Raises:
        ValueError: the model cannot switch its attention implementation.
    """
    previous = getattr(model.config, "_attn_implementation", None)
    if previous == "eager":
        yield model
        return
    if not hasattr(model, "set_attn_implementation"):
        raise ValueError(f"{type(model).__name__} cannot switch to eager attention to expose attention weights")
    model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        model.set_attn_implementation(previous)


@torch.no_grad()
def attention_maps(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Attention probabilities of every head for one batch, in eval mode.

    Args:
        model: a model of a supported family (in eval mode; the caller sets it).
        batch: ``input_ids``, ``attention_mask`` and optionally ``token_type_ids``, each ``[B, T]``.

    Returns:
        float tensor ``[L, B, H, T, T]``: ``A[l, b, h, q, k]`` = weight of key ``k`` for query ``q``. Rows of
        padded queries are whatever the model computes (callers mask them); padded keys have weight 0.
    """
    with eager_attention(model):
        out = model(**model_inputs(batch), output_attentions=True)
    if not out.attentions:
        raise ValueError(f"{type(model).__name__} returned no attention weights")
    return torch.stack(out.attentions)
