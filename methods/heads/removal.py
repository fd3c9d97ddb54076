"""Physical head removal, its in-place equivalent (zeroed value weights), save/load of pruned models and parameter
counts (part of :mod:`methods.heads`; import from there).

Removing a head (:func:`remove_heads`) equals zeroing its value weights and bias (:func:`zero_value_heads`) and
equals masking it (:func:`methods.heads.apply_head_mask`), protocol.md §9. A layer may lose all its heads; its
attention block then adds only the output-projection bias. Notation: L layers, H heads per layer (original), d head
size, B batch, T tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from methods.heads.layout import BertLayout, _pruned_heads_dict, get_layout, mask_from_pruned_heads


# --------------------------------------------------------------------------------------------
# In-place weight edits
# --------------------------------------------------------------------------------------------


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
    return scale_value_heads(model, _check_structural_mask(layout, mask))


def scale_value_heads(model: nn.Module, gates: torch.Tensor) -> nn.Module:
    """Multiply, in place, each head's value-projection weight rows and bias entries by its gate.

    A head's output is ``probs @ (x W_v^T + b_v)``, linear in its value rows and bias, so this equals masking with
    the float ``gates`` (:func:`~methods.heads.masking.apply_head_mask`): a gate of 0 prunes the head, a gate in
    (0, 1) scales its output, as a Voita et al. hard-concrete gate does at test time. Heads already physically
    removed are skipped.

    Args:
        model: a BERT-layout model (may be partially pruned).
        gates: ``[L, H]`` float, original head indexing.

    Returns:
        ``model`` (same object).

    Raises:
        UnsupportedArchitectureError; ValueError: ``gates`` is not ``[L, H]``.
    """
    layout = get_layout(model)
    gates = torch.as_tensor(gates).detach().cpu()
    if tuple(gates.shape) != (layout.num_layers, layout.num_heads):
        raise ValueError(f"gates must be [{layout.num_layers}, {layout.num_heads}], got {list(gates.shape)}")
    with torch.no_grad():
        for layer in range(layout.num_layers):
            value = layout.value(layer)
            for p, h in enumerate(layout.heads_present(layer)):
                g = float(gates[layer, h])
                if g == 1.0:
                    continue
                rows = _head_rows([p], layout.head_size).to(value.weight.device)
                value.weight[rows] *= g
                if value.bias is not None:
                    value.bias[rows] *= g
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
        """``hidden_states`` ``[B, T, hidden]`` -> (``[B, T, 0]``, no attention weights)."""
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
