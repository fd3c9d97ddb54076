"""Head masks (gates) through forward pre-hooks on the attention output projection (part of :mod:`headprune_bench.methods.heads`;
import from there). A pruned head contributes exactly zero to the concatenated head outputs ``[B, T, H*d]`` that
enter the output projection; the projection's bias stays (protocol.md §9; methods.md §0.1).

Notation: L layers, H heads per layer, d head size, B batch, T tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from headprune_bench.methods.heads.families import get_layout
from headprune_bench.methods.heads.layout import HeadLayout

# --------------------------------------------------------------------------------------------
# Masking (gates) via forward pre-hooks on the attention output projection
# --------------------------------------------------------------------------------------------


def _check_gate_mask(layout: HeadLayout, mask) -> torch.Tensor:
    """Validate a gate mask ``[L, H]``, ``[B, L, H]`` or ``[B, T, L, H]``; keep it as given
    (same tensor object, so gradients reach the caller's leaf)."""
    if not isinstance(mask, torch.Tensor):
        mask = torch.as_tensor(mask, dtype=torch.float32)
    lh = (layout.num_layers, layout.num_heads)
    ok = mask.dim() in (2, 3, 4) and tuple(mask.shape[-2:]) == lh
    if not ok:
        L, H = lh
        raise ValueError(
            f"head mask has shape {list(mask.shape)}; expected [L, H]=[{L}, {H}], "
            f"[B, L, H]=[B, {L}, {H}] or [B, T, L, H]=[B, T, {L}, {H}]"
        )
    return mask


class HeadMask:
    """Handle for a head mask applied by :func:`apply_head_mask`; also a context manager.

    Attributes:
        mask (torch.Tensor): ``[L, H]``, ``[B, L, H]`` or ``[B, T, L, H]``; 1 keep, 0 prune,
            fractional values act as gates. The hooks read ``self.mask`` at every forward, so a
            mask that requires grad receives d loss / d mask (Michel et al. 2019 §2 gate).

    ``with apply_head_mask(model, m) as hm: ...`` removes the hooks on exit.
    """

    def __init__(self, layout: HeadLayout, mask: torch.Tensor):
        self.layout = layout
        self.mask = _check_gate_mask(layout, mask)
        self._handles: list = []

    def set_mask(self, mask: torch.Tensor) -> None:
        """Replace the mask used by subsequent forwards (same shape rules as apply_head_mask).

        Raises:
            ValueError: wrong shape.
        """
        self.mask = _check_gate_mask(self.layout, mask)

    def remove(self) -> None:
        """Remove all hooks; the model is back to its original behaviour. Idempotent."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __enter__(self) -> HeadMask:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def _layer_gate(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Gate for ``layer``, broadcastable to ``x`` viewed as ``[B, T, H, d]``."""
        mask = self.mask
        batch, tokens = x.shape[0], x.shape[1]
        if mask.dim() == 2:  # [L, H] -> [H, 1]
            gate = mask[layer][:, None]
        elif mask.dim() == 3:  # [B, L, H] -> [B, 1, H, 1]
            if mask.shape[0] != batch:
                raise ValueError(f"per-example mask has B={mask.shape[0]} but the batch has B={batch}")
            gate = mask[:, layer][:, None, :, None]
        else:  # [B, T, L, H] -> [B, T, H, 1]
            if mask.shape[:2] != (batch, tokens):
                raise ValueError(
                    f"per-token mask has [B, T]={list(mask.shape[:2])} but the input has "
                    f"[B, T]={[batch, tokens]}"
                )
            gate = mask[:, :, layer][..., None]
        # Differentiable move/cast: gradients flow back to self.mask.
        return gate.to(device=x.device, dtype=x.dtype)


def apply_head_mask(model: nn.Module, mask: torch.Tensor) -> HeadMask:
    """Mask attention heads by gating their outputs before the attention output projection.

    Registers one forward pre-hook per layer on ``output_dense`` (W_O). Its input
    ``[B, T, H*d]`` is viewed as ``[B, T, H, d]`` and multiplied by the layer's gate, so a head
    with gate 0 contributes exactly 0 and W_O's bias stays (protocol.md §9). Independent of the
    attention implementation (eager, SDPA, ...). An all-ones mask is bit-identical to no mask
    (multiplication by 1.0 is exact).

    Args:
        model: a model of a supported family (:func:`~headprune_bench.methods.heads.families.get_layout`), not physically pruned.
        mask: float tensor, 1 keep, 0 prune, fractional = gate. Shapes: ``[L, H]`` (all
            examples), ``[B, L, H]`` (per example: one backward gives per-example gate
            gradients), ``[B, T, L, H]`` (per token). Moved/cast to the hidden states'
            device/dtype inside the hook, differentiably.

    Returns:
        :class:`HeadMask` handle (``.set_mask``, ``.remove``, context manager).

    Raises:
        UnsupportedArchitectureError: not a model of a supported family.
        ValueError: wrong mask shape (message names the expected ``[L, H]``), or the model has
            physically removed heads (masking a pruned model is not supported). A ``[B, ...]``
            mask whose B (or T) does not match the input raises ValueError at forward time.

    Source: protocol.md §9; methods.md §0.1; Michel et al. 2019 §2 (gate xi_h on each head).
    """
    layout = get_layout(model)
    if layout.is_pruned():
        raise ValueError(
            "masking a physically pruned model is not supported "
            f"(config.pruned_heads={getattr(model.config, 'pruned_heads', None)}); "
            "mask the unpruned model instead"
        )
    handle = HeadMask(layout, mask)
    heads, size = layout.num_heads, layout.head_size

    def make_hook(layer: int):
        def hook(module, args):
            x, *rest = args
            gated = x.reshape(*x.shape[:-1], heads, size) * handle._layer_gate(layer, x)
            return (gated.reshape(x.shape), *rest)

        return hook

    for layer in range(layout.num_layers):
        handle._handles.append(layout.output_dense(layer).register_forward_pre_hook(make_hook(layer)))
    return handle
