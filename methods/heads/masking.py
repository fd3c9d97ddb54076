"""Head masks (gates) through forward pre-hooks on the attention output projection; a pruned head contributes
exactly zero to the head outputs that enter it, its bias stays. See docs/heads.md ("Masking by hooks")."""

from __future__ import annotations

import torch
from torch import nn

from headprune_bench.methods.heads.families import get_layout
from headprune_bench.methods.heads.layout import HeadLayout


def _check_gate_mask(layout: HeadLayout, mask) -> torch.Tensor:
    """Validate an ``[L, H]``, ``[B, L, H]`` or ``[B, T, L, H]`` mask; the same tensor object, for its gradients."""
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
    """Handle of a head mask applied by :func:`apply_head_mask`; a context manager that removes the hooks on exit.
    ``mask`` (``[L, H]``, ``[B, L, H]`` or ``[B, T, L, H]``) is read at every forward, gradients included."""

    def __init__(self, layout: HeadLayout, mask: torch.Tensor):
        self.layout = layout
        self.mask = _check_gate_mask(layout, mask)
        self._handles: list = []

    def set_mask(self, mask: torch.Tensor) -> None:
        """Replace the mask of later forwards; ValueError on a wrong shape."""
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
        return gate.to(device=x.device, dtype=x.dtype)


def apply_head_mask(model: nn.Module, mask: torch.Tensor) -> HeadMask:
    """Mask heads by multiplying W_O's input ``[B, T, H*d]``, viewed as ``[B, T, H, d]``, by each layer's gate
    (one forward pre-hook per layer; any attention implementation; Michel et al. 2019 §2, docs/protocol.md §9).

    Args:
        model: a model of a supported family, not physically pruned.
        mask: float, 1 keep, 0 prune, fractional = gate; ``[L, H]``, ``[B, L, H]`` (per example) or
            ``[B, T, L, H]`` (per token), moved to the hidden states' device and dtype differentiably.

    Returns:
        :class:`HeadMask` handle (``.set_mask``, ``.remove``, context manager).

    Raises:
        UnsupportedArchitectureError: not a model of a supported family.
        ValueError: wrong mask shape, or a physically pruned model; at forward time, a B or T that does not
            match the input.
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
