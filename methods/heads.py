"""Attention-head masking and physical head removal for BERT-layout encoders.

transformers 5.x removed ``head_mask`` and ``prune_heads`` from BERT (PR #41076), so this module
provides both, with the semantics of protocol.md §9 and methods.md §0.1:

* A pruned head contributes exactly zero to the concatenated head outputs ``[B, T, H*d]`` that
  enter the attention output projection; the projection's bias stays.
* Masking there (:func:`apply_head_mask`) equals zeroing the head's value weights and bias
  (:func:`zero_value_heads`), and equals physically removing the head's Q/K/V rows and
  output-projection columns (:func:`remove_heads`).
* A layer may lose all its heads; its attention block then adds only the output-projection bias.

Head indices are always ORIGINAL indices ``0..H-1``; ``model.config.pruned_heads`` records the
physically removed heads as ``{str(layer): sorted list of original head indices}``, like
``config.pruned_heads`` in HF transformers 4.x.

Notation for shapes: L layers, H heads per layer (original), d head size, B batch, T tokens.

Reading order: errors and layout adapter, mask/dict helpers, masking hooks, in-place weight
edits (zeroing, removal), save/load, parameter counts.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

__all__ = [
    "UnsupportedArchitectureError",
    "BertLayout",
    "get_layout",
    "HeadMask",
    "apply_head_mask",
    "zero_value_heads",
    "remove_heads",
    "EmptySelfAttention",
    "save_pruned",
    "load_pruned",
    "count_parameters",
    "closed_form_parameter_count",
    "mask_from_pruned_heads",
    "pruned_heads_from_mask",
]


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


def _check_structural_mask(layout: BertLayout, mask) -> torch.Tensor:
    """Validate a binary ``[L, H]`` mask for weight edits; return it as a CPU tensor."""
    mask = torch.as_tensor(mask).detach().cpu()
    expected = (layout.num_layers, layout.num_heads)
    if tuple(mask.shape) != expected:
        raise ValueError(
            f"head mask has shape {list(mask.shape)}; expected [L, H]={list(expected)}"
        )
    if not torch.all((mask == 0) | (mask == 1)):
        raise ValueError("weight edits need a binary mask (0 = prune, 1 = keep); got fractional gates")
    return mask


# --------------------------------------------------------------------------------------------
# Masking (gates) via forward pre-hooks on the attention output projection
# --------------------------------------------------------------------------------------------


def _check_gate_mask(layout: BertLayout, mask) -> torch.Tensor:
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

    def __init__(self, layout: BertLayout, mask: torch.Tensor):
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

    def __enter__(self) -> "HeadMask":
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
        model: a BERT-layout model (see :class:`BertLayout`), not physically pruned.
        mask: float tensor, 1 keep, 0 prune, fractional = gate. Shapes: ``[L, H]`` (all
            examples), ``[B, L, H]`` (per example: one backward gives per-example gate
            gradients), ``[B, T, L, H]`` (per token). Moved/cast to the hidden states'
            device/dtype inside the hook, differentiably.

    Returns:
        :class:`HeadMask` handle (``.set_mask``, ``.remove``, context manager).

    Raises:
        UnsupportedArchitectureError: not a BERT-layout model.
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


# --------------------------------------------------------------------------------------------
# In-place weight edits
# --------------------------------------------------------------------------------------------


def _head_rows(positions: list[int], head_size: int) -> torch.Tensor:
    """Row indices ``[len(positions)*d]`` covering the given head positions."""
    return torch.tensor(
        [p * head_size + i for p in positions for i in range(head_size)], dtype=torch.long
    )


def zero_value_heads(model: nn.Module, mask: torch.Tensor) -> nn.Module:
    """Zero, in place, the value-projection weight rows and bias entries of pruned heads.

    Equivalent to masking with ``mask`` (protocol.md §9): a head with zero values outputs
    ``probs @ 0 = 0``. Heads already physically removed are skipped.

    Args:
        model: a BERT-layout model (may be partially pruned).
        mask: binary ``[L, H]`` in original head indexing, 0 = prune.

    Returns:
        ``model`` (same object).

    Raises:
        UnsupportedArchitectureError, ValueError (wrong shape or non-binary mask).
    """
    layout = get_layout(model)
    mask = _check_structural_mask(layout, mask)
    with torch.no_grad():
        for layer in range(layout.num_layers):
            present = layout.heads_present(layer)
            positions = [p for p, h in enumerate(present) if mask[layer, h] == 0]
            if not positions:
                continue
            value = layout.value(layer)
            rows = _head_rows(positions, layout.head_size).to(value.weight.device)
            value.weight[rows] = 0.0
            if value.bias is not None:
                value.bias[rows] = 0.0
    return model


def _select(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """New Linear keeping ``index`` along ``dim`` of the weight (0 = output rows, which also
    slices the bias; 1 = input columns, bias kept whole), like HF 4.x ``prune_linear_layer``."""
    index = index.to(linear.weight.device)
    weight = linear.weight.index_select(dim, index).detach().clone()
    bias = None
    if linear.bias is not None:
        bias = linear.bias if dim == 1 else linear.bias[index]
        bias = bias.detach().clone()
    # Build on "meta" (no random init; nn.Linear's init also warns on 0-sized weights), then
    # attach the sliced tensors.
    new = nn.Linear(1, 1, bias=bias is not None, device="meta")
    new.out_features, new.in_features = weight.shape
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias, requires_grad=linear.bias.requires_grad)
    return new


class EmptySelfAttention(nn.Module):
    """Stand-in for a self-attention module whose heads were all removed.

    Keeps zero-width ``query``/``key``/``value`` Linears (``[0, hidden]`` weights, no
    parameters counted) so the state-dict keys and the layout accessors stay uniform.
    ``forward`` returns ``([B, T, 0] tensor, None)``; the output projection (``in_features``
    0) then adds only its bias. With ``output_attentions=True`` such a layer contributes no
    entry to ``outputs.attentions`` (transformers records only ``BertSelfAttention`` modules).
    """

    def __init__(self, query: nn.Linear, key: nn.Linear, value: nn.Linear, head_size: int):
        super().__init__()
        self.query, self.key, self.value = query, key, value
        self.num_attention_heads = 0
        self.attention_head_size = head_size
        self.all_head_size = 0

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        return self.value(hidden_states), None


def remove_heads(model: nn.Module, mask: torch.Tensor) -> nn.Module:
    """Physically remove pruned heads (mask == 0), in place.

    For each layer, slices the removed heads' Q/K/V rows (and bias entries) and the output
    projection's input columns (its bias is kept), and updates the self-attention module's
    ``num_attention_heads`` / ``all_head_size``. A layer that loses ALL heads gets an
    :class:`EmptySelfAttention` whose output ``[B, T, 0]`` makes the attention block add only
    W_O's bias. Removed heads are merged into ``model.config.pruned_heads`` as
    ``{str(layer): sorted list of original head indices}``. Removing an already removed head
    is a no-op, so the function works on partially pruned models and incremental calls equal
    one call with the combined mask.

    Args:
        model: a BERT-layout model.
        mask: binary ``[L, H]`` in ORIGINAL head indexing, 0 = remove.

    Returns:
        ``model`` (same object).

    Raises:
        UnsupportedArchitectureError, ValueError (wrong shape or non-binary mask; module widths
        inconsistent with ``config.pruned_heads``).

    Source: HF transformers 4.x ``BertAttention.prune_heads`` / ``prune_linear_layer``
    (semantics, incl. the kept bias); protocol.md §9; methods.md §0.2 (fully pruned layers).
    """
    layout = get_layout(model)
    mask = _check_structural_mask(layout, mask)
    d = layout.head_size
    recorded = _pruned_heads_dict(model.config)
    for layer in range(layout.num_layers):
        present = layout.heads_present(layer)
        attn_self = layout.self_attention(layer)
        if layout.query(layer).out_features != len(present) * d:
            raise ValueError(
                f"layer {layer}: query has {layout.query(layer).out_features} rows but "
                f"config.pruned_heads implies {len(present)} heads of size {d}"
            )
        to_remove = [h for h in present if mask[layer, h] == 0]
        if not to_remove:
            continue
        keep_positions = [p for p, h in enumerate(present) if mask[layer, h] == 1]
        rows = _head_rows(keep_positions, d)
        query = _select(attn_self.query, rows, dim=0)
        key = _select(attn_self.key, rows, dim=0)
        value = _select(attn_self.value, rows, dim=0)
        attention = layout.attention(layer)
        attention.output.dense = _select(attention.output.dense, rows, dim=1)
        if keep_positions:
            attn_self.query, attn_self.key, attn_self.value = query, key, value
            attn_self.num_attention_heads = len(keep_positions)
            attn_self.all_head_size = len(keep_positions) * d
        else:
            attention.self = EmptySelfAttention(query, key, value, d)
        recorded[layer] = sorted(set(recorded.get(layer, [])) | set(to_remove))
    model.config.pruned_heads = {str(layer): heads for layer, heads in sorted(recorded.items())}
    return model


# --------------------------------------------------------------------------------------------
# Save / load of pruned models
# --------------------------------------------------------------------------------------------


def save_pruned(model: nn.Module, path, tokenizer=None) -> None:
    """``model.save_pretrained(path)``; the config carries ``pruned_heads`` (original indices). With
    ``tokenizer`` (a Hugging Face tokenizer) it is saved beside, so the folder is complete.

    Raises:
        UnsupportedArchitectureError: not a BERT-layout model.
    """
    get_layout(model)
    model.config.pruned_heads = {
        str(layer): heads for layer, heads in sorted(_pruned_heads_dict(model.config).items())
    }
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)


def _load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = path / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(path / shard))
        return state
    return load_file(path / "model.safetensors")


def load_pruned(path, model_cls=None, *, attn_implementation: str | None = None) -> nn.Module:
    """Load a model written by :func:`save_pruned`.

    Rebuilds the unpruned architecture from the config (``AutoModelForSequenceClassification
    .from_config`` or ``model_cls``: an Auto class or a concrete model class), applies
    :func:`remove_heads` according to ``config.pruned_heads``, then loads the safetensors state
    dict strictly (tensors assigned as saved, so the saved dtype is kept). Returns the model in
    eval mode.

    Args:
        path: folder written by ``save_pruned``.
        model_cls: optional model class; default AutoModelForSequenceClassification.
        attn_implementation: optional, e.g. ``"eager"`` or ``"sdpa"``; transformers' default
            otherwise.

    Raises:
        RuntimeError: the state dict does not match the rebuilt architecture (strict load).
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification

    path = Path(path)
    config = AutoConfig.from_pretrained(path)
    pruned = _pruned_heads_dict(config)
    config.pruned_heads = {}  # the fresh model has every head; remove_heads re-records them
    model_cls = model_cls or AutoModelForSequenceClassification
    if hasattr(model_cls, "from_config"):  # Auto classes
        model = model_cls.from_config(config)
    else:  # a concrete class such as BertForSequenceClassification
        model = model_cls(config)
    if attn_implementation:
        model.set_attn_implementation(attn_implementation)
    layout = get_layout(model)
    remove_heads(model, mask_from_pruned_heads(pruned, layout.num_layers, layout.num_heads))
    model.load_state_dict(_load_state_dict(path), strict=True, assign=True)
    return model.eval()


# --------------------------------------------------------------------------------------------
# Parameter counts
# --------------------------------------------------------------------------------------------


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (shared parameters counted once)."""
    return sum(p.numel() for p in model.parameters())


def closed_form_parameter_count(config, mask: torch.Tensor, *, classifier: bool = True) -> int:
    """Parameter count of a BERT model after removing the heads with ``mask == 0``.

    Full count from the architecture arithmetic (embeddings, L layers, pooler and, if
    ``classifier``, the ``BertForSequenceClassification`` head; ``classifier=False`` gives
    ``BertModel`` with pooler), minus, per removed head, ``3*(hidden*d + d)`` (Q/K/V rows and
    biases) ``+ hidden*d`` (W_O columns; W_O's bias stays). Heads already in
    ``config.pruned_heads`` count as removed too (as after :func:`remove_heads`).

    Args:
        config: a ``BertConfig``.
        mask: ``[L, H]``, 0 = removed (original indexing).

    Raises:
        ValueError: wrong mask shape.
    """
    h, L, H = config.hidden_size, config.num_hidden_layers, config.num_attention_heads
    d, inter = h // H, config.intermediate_size
    mask = torch.as_tensor(mask)
    if tuple(mask.shape) != (L, H):
        raise ValueError(f"head mask has shape {list(mask.shape)}; expected [L, H]=[{L}, {H}]")

    embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h
    embeddings += 2 * h  # LayerNorm
    attention = 4 * (h * h + h) + 2 * h  # Q, K, V, W_O (+ biases), LayerNorm
    feed_forward = (h * inter + inter) + (inter * h + h) + 2 * h  # two Linears, LayerNorm
    pooler = h * h + h
    full = embeddings + L * (attention + feed_forward) + pooler
    if classifier:
        full += h * config.num_labels + config.num_labels

    removed = mask == 0
    for layer, heads in _pruned_heads_dict(config).items():
        removed[layer, heads] = True
    per_head = 3 * (h * d + d) + h * d
    return full - int(removed.sum()) * per_head
