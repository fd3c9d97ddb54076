"""Attention maps of an encoder of any supported family (confidence and redundancy scores), under eager attention."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from headprune_bench.methods.base import model_inputs


@contextlib.contextmanager
def eager_attention(model: nn.Module) -> Iterator[nn.Module]:
    """Run a block with ``attn_implementation="eager"``, restored on exit; ValueError if the model cannot switch."""
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
def attention_maps(model: nn.Module, batch: dict[str, torch.Tensor], autocast=contextlib.nullcontext) -> torch.Tensor:
    """Attention probabilities of every head for one batch, in eval mode.

    ``model``: a supported family, in eval mode; ``batch``: ``[B, T]`` ``input_ids``, ``attention_mask`` (and
    ``token_type_ids``); ``autocast``: the forward pass's context (``PruningContext.autocast``). Returns float32
    ``[L, B, H, T, T]`` (computed in bf16 under bf16 autocast), ``A[l, b, h, q, k]`` = weight of key k for query q
    (padded keys 0; padded query rows left to the caller). Raises ValueError: no attention weights returned.
    """
    with eager_attention(model), autocast():
        out = model(**model_inputs(batch), output_attentions=True)
    if not out.attentions:
        raise ValueError(f"{type(model).__name__} returned no attention weights")
    return torch.stack(out.attentions).float()
