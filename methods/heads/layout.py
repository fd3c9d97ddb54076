"""The layout-adapter interface (where an encoder keeps its attention modules; one implementation per family in
:mod:`headprune_bench.methods.heads.families`) and the ``[L, H]`` mask <-> ``config.pruned_heads`` helpers (part of
:mod:`headprune_bench.methods.heads`; import from there).

Head indices are always ORIGINAL indices ``0..H-1``; ``model.config.pruned_heads`` records the physically removed
heads as ``{str(layer): sorted list of original head indices}``, like ``config.pruned_heads`` in HF transformers 4.x.
Notation: L layers, H heads per layer (original), d head size.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

# --------------------------------------------------------------------------------------------
# Architecture adapter: the interface every encoder family implements (headprune_bench.methods.heads.families)
# --------------------------------------------------------------------------------------------


class UnsupportedArchitectureError(ValueError):
    """Raised when a model's family has no layout adapter, or its modules are not where the adapter expects.

    The message names the model class, the ``config.model_type`` found and the supported model types.
    """


class HeadLayout:
    """Where an encoder family keeps its layers, heads, Q/K/V and attention output projection, and how its
    modules change when heads are removed. One subclass per family (:mod:`headprune_bench.methods.heads.families`); everything
    else (masking, zeroing, removal, export, every method) goes through this interface only.

    The interface, per layer ``l`` (ORIGINAL head indices ``0..H-1`` everywhere):

    * :meth:`encoder_layers` the ``nn.ModuleList`` of L layers; :meth:`self_attention` the module that holds the
      per-head projections (replaced by an empty stand-in when every head goes);
    * :meth:`head_projections`: every Linear whose output rows come in per-head blocks of d rows, by attribute
      name on the self-attention module (Q, K, V, and DeBERTa's separate relative-position projections);
      :meth:`query` / :meth:`key` / :meth:`value`;
    * :meth:`output_dense` / :meth:`set_output_dense`: the attention output projection W_O, whose input columns
      come in per-head blocks (its bias is not per head and stays);
    * :meth:`set_head_count` the module attributes that count heads; :meth:`empty_self_attention` the stand-in
      of a layer without heads (its attention block then adds only W_O's bias).

    Class attributes:
        family (str): the family's name; model_types (tuple[str, ...]): the ``config.model_type`` values served;
        projection_names (tuple[str, str, str]): attribute names of Q, K, V on the self-attention module;
        attn_implementations (tuple[str, ...]): attention kernels the family's classes offer (``"eager"`` first);
        removes (str): what removing a head removes, in words (README, closing notes).

    Instance attributes (from the ORIGINAL, unpruned architecture in ``model.config``):
        num_layers (int): L. num_heads (int): H. head_size (int): d. hidden_size (int): model width.
        base: the encoder (``model.base_model``: embeddings + layers). config: ``model.config``.

    Raises:
        UnsupportedArchitectureError: ``config.model_type`` is not one of :attr:`model_types`, or the modules are
            not where the family keeps them.

    Source: protocol.md §9; the family's ``modeling_*.py`` in HF transformers (module names).
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
        """d: ``config.attention_head_size`` when the config sets it (a DeBERTa-v2 field; transformers 5.24 builds but
        cannot run a model whose d differs from hidden // H), else hidden // H."""
        return int(getattr(config, "attention_head_size", None) or config.hidden_size // config.num_attention_heads)

    @classmethod
    def max_tokens(cls, config) -> int | None:
        """The longest input (tokens) the family's embeddings take: ``max_position_embeddings`` (RoBERTa / XLM-R:
        fewer, see :class:`~headprune_bench.methods.heads.families.RobertaLayout`); None when no absolute position limits it."""
        return int(config.max_position_embeddings)

    def _find_base(self, model: nn.Module) -> nn.Module | None:
        for candidate in (model, getattr(model, "base_model", None)):
            if candidate is None:
                continue
            layers = self._layers_of(candidate)
            if isinstance(layers, nn.ModuleList) and len(layers) > 0 and hasattr(candidate, "embeddings"):
                return candidate
        return None

    # ------------------------------------------------------------------ what a family defines

    def _layers_of(self, base: nn.Module) -> nn.ModuleList | None:
        """The ModuleList of layers of a candidate encoder, or None."""
        raise NotImplementedError

    def self_attention(self, layer: int) -> nn.Module:
        """The module holding the per-head projections of ``layer`` (or the empty stand-in)."""
        raise NotImplementedError

    def set_self_attention(self, layer: int, module: nn.Module) -> None:
        """Replace the self-attention module of ``layer``."""
        raise NotImplementedError

    def output_dense(self, layer: int) -> nn.Linear:
        """Attention output projection W_O, weight ``[hidden, n_present*d]``, bias ``[hidden]``."""
        raise NotImplementedError

    def set_output_dense(self, layer: int, linear: nn.Linear) -> None:
        """Replace W_O of ``layer``."""
        raise NotImplementedError

    def set_head_count(self, layer: int, heads: int) -> None:
        """Set the self-attention module's head-count attributes after removal (``heads >= 1``)."""
        module = self.self_attention(layer)
        module.num_attention_heads = heads
        module.all_head_size = heads * self.head_size

    def empty_self_attention(self, layer: int, projections: dict[str, nn.Linear], output: nn.Linear) -> nn.Module:
        """The stand-in for ``layer``'s self-attention once every head is removed (zero-width ``projections``,
        ``output`` the sliced W_O with 0 input columns)."""
        return EmptySelfAttention(projections, self.projection_names[2], self.head_size)

    # ------------------------------------------------------------------ derived, the same for every family

    def encoder_layers(self) -> nn.ModuleList:
        """The encoder's ``nn.ModuleList`` of L transformer layers."""
        return self._layers_of(self.base)

    def head_projections(self, layer: int) -> dict[str, nn.Linear]:
        """Every Linear of the self-attention module whose output rows are per-head blocks of d rows, by attribute
        name (Q, K, V first)."""
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
        """Sorted ORIGINAL indices of the heads of ``layer`` still physically present.

        Read from ``config.pruned_heads`` (keys may be ``str`` or ``int``).
        """
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
    """Stand-in for a self-attention module whose heads were all removed.

    Keeps the zero-width per-head projections (``[0, hidden]`` weights, no parameters counted) under their
    family's attribute names, so the state-dict keys and the layout accessors stay uniform. ``forward`` returns
    ``([B, T, 0] tensor, None)``, or, when the family keeps W_O inside the self-attention module (DistilBERT's
    ``out_lin``), ``(W_O([B, T, 0]), None)``: W_O's bias broadcast to ``[B, T, hidden]``. With
    ``output_attentions=True`` such a layer contributes no attention map (transformers records only its own
    attention classes).

    Args:
        projections: ``{attribute name: zero-width Linear}``.
        value_name: which of them is the value projection.
        head_size: d.
        output: ``(attribute name, W_O)`` when W_O belongs to this module, else None.
    """

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
        """``hidden_states`` ``[B, T, hidden]`` -> (``[B, T, 0]`` or ``[B, T, hidden]``, no attention weights)."""
        out = getattr(self, self.value_name)(hidden_states)
        if self.output_name is not None:
            out = getattr(self, self.output_name)(out)
        return out, None


# --------------------------------------------------------------------------------------------
# Mask <-> pruned-heads helpers
# --------------------------------------------------------------------------------------------


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
    """Build a float32 ``[L, H]`` mask: 0 for each pruned head, 1 elsewhere.

    Args:
        pruned: ``{layer: [heads]}``; keys may be ``int`` or ``str`` (as in a saved config),
            values a list of original head indices (a bare ``int`` is accepted too).
        num_layers, num_heads: L and H.

    Raises:
        ValueError: a layer or head index is out of range.
    """
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
    """``{layer: sorted list of heads with mask == 0}`` for an ``[L, H]`` mask.

    Only layers with at least one pruned head appear. Values are always lists, never bare ints
    (the ``.squeeze().tolist()`` pitfall of methods.md §0.2).

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
