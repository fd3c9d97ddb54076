"""Where a BERT-layout encoder keeps its attention modules, and the ``[L, H]`` mask <-> ``config.pruned_heads``
helpers (part of :mod:`methods.heads`; import from there).

Head indices are always ORIGINAL indices ``0..H-1``; ``model.config.pruned_heads`` records the physically removed
heads as ``{str(layer): sorted list of original head indices}``, like ``config.pruned_heads`` in HF transformers 4.x.
Notation: L layers, H heads per layer (original), d head size.
"""

from __future__ import annotations

import torch
from torch import nn


# --------------------------------------------------------------------------------------------
# Architecture adapter
# --------------------------------------------------------------------------------------------


class UnsupportedArchitectureError(ValueError):
    """Raised when a model does not have a supported (BERT) layout.

    The message names the model class, the ``config.model_type`` found and the supported
    model types.
    """


class BertLayout:
    """The one adapter that knows where a BERT-layout model keeps its attention modules.

    Accepts ``BertModel``, any ``Bert*`` task model (``BertForSequenceClassification``, ...),
    or anything whose ``.bert`` / ``.base_model`` is a BERT-layout encoder
    (``embeddings`` + ``encoder.layer[i].attention.{self,output}``).

    Attributes (all from the ORIGINAL, unpruned architecture in ``model.config``):
        num_layers (int): L.
        num_heads (int): H, heads per layer before any pruning.
        head_size (int): d = hidden_size // H.
        hidden_size (int): model width.

    Raises:
        UnsupportedArchitectureError: ``config.model_type`` is not in
            :attr:`supported_model_types`, or the module layout is not BERT's.

    Source: HF transformers ``modeling_bert.py`` (module names); protocol.md §9.
    """

    supported_model_types: tuple[str, ...] = ("bert",)

    def __init__(self, model: nn.Module):
        config = getattr(model, "config", None)
        model_type = getattr(config, "model_type", None)
        if model_type not in self.supported_model_types:
            raise UnsupportedArchitectureError(
                f"{type(model).__name__} (model_type={model_type!r}) is not supported; "
                f"supported model types: {self.supported_model_types}"
            )
        self.base = self._find_base(model)
        if self.base is None:
            raise UnsupportedArchitectureError(
                f"{type(model).__name__} (model_type={model_type!r}) has no BERT-layout encoder "
                f"(.embeddings and .encoder.layer[i].attention.self/.output); "
                f"supported model types: {self.supported_model_types}"
            )
        self.config = config
        self.num_layers: int = config.num_hidden_layers
        self.num_heads: int = config.num_attention_heads
        self.hidden_size: int = config.hidden_size
        self.head_size: int = config.hidden_size // config.num_attention_heads

    @staticmethod
    def _find_base(model: nn.Module) -> nn.Module | None:
        for candidate in (model, getattr(model, "bert", None), getattr(model, "base_model", None)):
            layers = getattr(getattr(candidate, "encoder", None), "layer", None)
            if (
                hasattr(candidate, "embeddings")
                and isinstance(layers, nn.ModuleList)
                and all(hasattr(layer, "attention") for layer in layers)
            ):
                return candidate
        return None

    def encoder_layers(self) -> nn.ModuleList:
        """The encoder's ``nn.ModuleList`` of L transformer layers."""
        return self.base.encoder.layer

    def attention(self, layer: int) -> nn.Module:
        """``BertAttention`` of ``layer``: ``.self`` (Q/K/V + attention) and ``.output``."""
        return self.encoder_layers()[layer].attention

    def self_attention(self, layer: int) -> nn.Module:
        """The self-attention module (``BertSelfAttention`` or the empty stand-in)."""
        return self.attention(layer).self

    def query(self, layer: int) -> nn.Linear:
        """Query projection, weight ``[n_present*d, hidden]``."""
        return self.self_attention(layer).query

    def key(self, layer: int) -> nn.Linear:
        """Key projection, weight ``[n_present*d, hidden]``."""
        return self.self_attention(layer).key

    def value(self, layer: int) -> nn.Linear:
        """Value projection, weight ``[n_present*d, hidden]``."""
        return self.self_attention(layer).value

    def output_dense(self, layer: int) -> nn.Linear:
        """Attention output projection W_O, weight ``[hidden, n_present*d]``, bias ``[hidden]``."""
        return self.attention(layer).output.dense

    def heads_present(self, layer: int) -> list[int]:
        """Sorted ORIGINAL indices of the heads of ``layer`` still physically present.

        Read from ``config.pruned_heads`` (keys may be ``str`` or ``int``).
        """
        removed = _pruned_heads_dict(self.config).get(layer, [])
        return [h for h in range(self.num_heads) if h not in removed]

    def is_pruned(self) -> bool:
        """True if any head has been physically removed (per config or per module widths)."""
        return any(
            len(self.heads_present(layer)) != self.num_heads
            or self.query(layer).out_features != self.num_heads * self.head_size
            for layer in range(self.num_layers)
        )


def get_layout(model: nn.Module) -> BertLayout:
    """Return the layout adapter for ``model``.

    Raises:
        UnsupportedArchitectureError: the model is not of a supported layout.
    """
    return BertLayout(model)


# --------------------------------------------------------------------------------------------
# Mask <-> pruned-heads helpers
# --------------------------------------------------------------------------------------------


def _pruned_heads_dict(config) -> dict[int, list[int]]:
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
