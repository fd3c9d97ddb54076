"""The layout-adapter interface :class:`HeadLayout` and the ``[L, H]`` mask <-> ``config.pruned_heads`` helpers
(original head indices ``0..H-1`` throughout). See docs/heads.md ("Layouts and families")."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn


class UnsupportedArchitectureError(ValueError):
    """A model's family has no layout adapter, or its modules are not where the adapter expects them."""


class HeadLayout:
    """Where an encoder family keeps its layers, per-head projections (Q/K/V, DeBERTa's position projections) and
    attention output projection W_O, and how they change when heads go; one subclass per family. Per-head
    projections have d output rows per head; W_O has d input columns per head and a bias that stays.

    Attributes: family, model_types (``config.model_type`` values served), projection_names (Q, K, V),
    attn_implementations, removes (in words); num_layers (L), num_heads (H), head_size (d), hidden_size (all of
    the unpruned architecture), base (``model.base_model``), config.

    Raises:
        UnsupportedArchitectureError: another ``model_type``, or the modules are not where the family keeps them.
    """

    family: ClassVar[str] = ""
    model_types: ClassVar[tuple[str, ...]] = ()
    projection_names: ClassVar[tuple[str, str, str]] = ("query", "key", "value")
    attn_implementations: ClassVar[tuple[str, ...]] = ("eager", "sdpa")
    removes: ClassVar[str] = ""

    def __init__(self, model: nn.Module):
        config = getattr(model, "config", None)
        model_type = getattr(config, "model_type", None)
        if model_type not in self.model_types:
            raise UnsupportedArchitectureError(
                f"{type(model).__name__} (model_type={model_type!r}) is not of the {self.family} family "
                f"(model types {self.model_types})"
            )
        self.config = config
        self.base = self._find_base(model)
        if self.base is None:
            raise UnsupportedArchitectureError(
                f"{type(model).__name__} (model_type={model_type!r}) has no {self.family} encoder where the "
                f"{type(self).__name__} adapter looks for it ({self.where})"
            )
        self.num_layers: int = config.num_hidden_layers
        self.num_heads: int = config.num_attention_heads
        self.hidden_size: int = config.hidden_size
        self.head_size: int = self.head_size_of(config)

    where: ClassVar[str] = ""
    """Where the adapter looks for the layers, for error messages."""

    @staticmethod
    def head_size_of(config) -> int:
        """d: ``config.attention_head_size`` when set (DeBERTa-v2), else hidden // H."""
        return int(getattr(config, "attention_head_size", None) or config.hidden_size // config.num_attention_heads)

    @classmethod
    def max_tokens(cls, config) -> int | None:
        """The longest input (tokens) the embeddings take; None when no absolute position limits it."""
        return int(config.max_position_embeddings)

    def _find_base(self, model: nn.Module) -> nn.Module | None:
        for candidate in (model, getattr(model, "base_model", None)):
            if candidate is None:
                continue
            layers = self._layers_of(candidate)
            if isinstance(layers, nn.ModuleList) and len(layers) > 0 and hasattr(candidate, "embeddings"):
                return candidate
        return None

    def _layers_of(self, base: nn.Module) -> nn.ModuleList | None:
        raise NotImplementedError

    def self_attention(self, layer: int) -> nn.Module:
        """The module holding the per-head projections of ``layer`` (or the empty stand-in)."""
        raise NotImplementedError

    def set_self_attention(self, layer: int, module: nn.Module) -> None:
        raise NotImplementedError

    def output_dense(self, layer: int) -> nn.Linear:
        """Attention output projection W_O, weight ``[hidden, n_present*d]``, bias ``[hidden]``."""
        raise NotImplementedError

    def set_output_dense(self, layer: int, linear: nn.Linear) -> None:
        raise NotImplementedError

    def set_head_count(self, layer: int, heads: int) -> None:
        """Set the self-attention module's head-count attributes after removal (``heads >= 1``)."""
        module = self.self_attention(layer)
        module.num_attention_heads = heads
        module.all_head_size = heads * self.head_size

    def empty_self_attention(self, layer: int, projections: dict[str, nn.Linear], output: nn.Linear) -> nn.Module:
        """The stand-in for ``layer``'s self-attention without heads (zero-width ``projections``, W_O ``output``)."""
        return EmptySelfAttention(projections, self.projection_names[2], self.head_size)

    def encoder_layers(self) -> nn.ModuleList:
        """The encoder's ``nn.ModuleList`` of L transformer layers."""
        return self._layers_of(self.base)

    def head_projections(self, layer: int) -> dict[str, nn.Linear]:
        """Every per-head Linear of the self-attention module, by attribute name (Q, K, V first)."""
        module = self.self_attention(layer)
        return {name: getattr(module, name) for name in self.projection_names}

    def query(self, layer: int) -> nn.Linear:
        """Query projection, weight ``[n_present*d, hidden]``."""
        return getattr(self.self_attention(layer), self.projection_names[0])

    def key(self, layer: int) -> nn.Linear:
        """Key projection, weight ``[n_present*d, hidden]``."""
        return getattr(self.self_attention(layer), self.projection_names[1])

    def value(self, layer: int) -> nn.Linear:
        """Value projection, weight ``[n_present*d, hidden]``."""
        return getattr(self.self_attention(layer), self.projection_names[2])

    def heads_present(self, layer: int) -> list[int]:
        """Sorted original indices of the heads of ``layer`` still present (from ``config.pruned_heads``)."""
        removed = pruned_heads_dict(self.config).get(layer, [])
        return [h for h in range(self.num_heads) if h not in removed]

    def is_pruned(self) -> bool:
        """True if any head has been physically removed (per config or per module widths)."""
        return any(
            len(self.heads_present(layer)) != self.num_heads
            or self.query(layer).out_features != self.num_heads * self.head_size
            for layer in range(self.num_layers)
        )


class EmptySelfAttention(nn.Module):
    """Stand-in for a self-attention module whose heads were all removed (docs/heads.md, "Physical removal"):
    ``projections`` ``{name: zero-width Linear}``, the value projection's ``value_name``, ``head_size`` d, and
    ``output`` ``(name, W_O)`` when W_O belongs to this module (else None)."""

    def __init__(self, projections: dict[str, nn.Linear], value_name: str, head_size: int,
                 output: tuple[str, nn.Linear] | None = None):
        super().__init__()
        for name, linear in projections.items():
            setattr(self, name, linear)
        self.value_name = value_name
        self.output_name = None
        if output is not None:
            self.output_name = output[0]
            setattr(self, output[0], output[1])
        self.num_attention_heads = 0
        self.attention_head_size = head_size
        self.all_head_size = 0

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        """``[B, T, hidden]`` -> (``[B, T, 0]``, or W_O's bias ``[B, T, hidden]`` when ``output`` was given; None)."""
        out = getattr(self, self.value_name)(hidden_states)
        if self.output_name is not None:
            out = getattr(self, self.output_name)(out)
        return out, None


def pruned_heads_dict(config) -> dict[int, list[int]]:
    """``config.pruned_heads`` normalised to ``{int layer: sorted list[int]}`` (empty if unset)."""
    raw = getattr(config, "pruned_heads", None) or {}
    out: dict[int, list[int]] = {}
    for layer, heads in raw.items():
        heads = [heads] if isinstance(heads, int) else heads
        if heads:
            out[int(layer)] = sorted({int(h) for h in heads})
    return out


def mask_from_pruned_heads(pruned: dict, num_layers: int, num_heads: int) -> torch.Tensor:
    """Float32 ``[L, H]`` mask, 0 for each head of ``pruned`` (``{layer: [heads]}``, ``int`` or ``str`` keys, a bare
    ``int`` allowed), 1 elsewhere. Raises ValueError: a layer or head index out of range."""
    mask = torch.ones(num_layers, num_heads, dtype=torch.float32)
    for layer, heads in pruned.items():
        layer = int(layer)
        heads = [heads] if isinstance(heads, int) else list(heads)
        if not 0 <= layer < num_layers or any(not 0 <= int(h) < num_heads for h in heads):
            raise ValueError(
                f"pruned heads {{{layer}: {heads}}} out of range for [L, H]=[{num_layers}, {num_heads}]"
            )
        mask[layer, [int(h) for h in heads]] = 0.0
    return mask


def pruned_heads_from_mask(mask: torch.Tensor) -> dict[int, list[int]]:
    """``{layer: sorted list of heads with mask == 0}`` of an ``[L, H]`` mask, layers with a pruned head only.

    Raises:
        ValueError: ``mask`` is not 2-D.
    """
    mask = torch.as_tensor(mask)
    if mask.dim() != 2:
        raise ValueError(f"expected an [L, H] mask, got shape {list(mask.shape)}")
    pruned = {}
    for layer in range(mask.shape[0]):
        heads = torch.nonzero(mask[layer] == 0).flatten().tolist()
        if heads:
            pruned[layer] = heads
    return pruned
