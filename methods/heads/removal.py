"""Physical head removal, its in-place equivalent (zeroed value weights), save/load of pruned models and parameter
counts (part of :mod:`headprune_bench.methods.heads`; import from there).

Removing a head (:func:`remove_heads`) equals zeroing its value weights and bias (:func:`zero_value_heads`) and
equals masking it (:func:`headprune_bench.methods.heads.apply_head_mask`), protocol.md §9. A layer may lose all its heads; its
attention block then adds only the output-projection bias. Notation: L layers, H heads per layer (original), d head
size, B batch, T tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from headprune_bench.methods.heads.families import get_layout
from headprune_bench.methods.heads.layout import HeadLayout, mask_from_pruned_heads, pruned_heads_dict

# --------------------------------------------------------------------------------------------
# In-place weight edits
# --------------------------------------------------------------------------------------------


def _check_structural_mask(layout: HeadLayout, mask) -> torch.Tensor:
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
        model: a model of a supported family (may be partially pruned).
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
    the float ``gates`` (:func:`~headprune_bench.methods.heads.masking.apply_head_mask`): a gate of 0 prunes the head, a gate in
    (0, 1) scales its output, as a Voita et al. hard-concrete gate does at test time. Heads already physically
    removed are skipped.

    Args:
        model: a model of a supported family (may be partially pruned).
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


def remove_heads(model: nn.Module, mask: torch.Tensor) -> nn.Module:
    """Physically remove pruned heads (mask == 0), in place.

    For each layer, slices the removed heads' rows (and bias entries) out of every per-head projection of the
    family (Q/K/V; DeBERTa's relative-position projections too: :meth:`HeadLayout.head_projections`) and their
    input columns out of the output projection (its bias is kept), and updates the self-attention module's head
    counts. A layer that loses ALL heads gets the family's :class:`~headprune_bench.methods.heads.layout.EmptySelfAttention`, so
    the attention block adds only W_O's bias. Removed heads are merged into ``model.config.pruned_heads`` as
    ``{str(layer): sorted list of original head indices}``. Removing an already removed head
    is a no-op, so the function works on partially pruned models and incremental calls equal
    one call with the combined mask.

    Args:
        model: a model of a supported family (:func:`~headprune_bench.methods.heads.families.get_layout`).
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
    recorded = pruned_heads_dict(model.config)
    for layer in range(layout.num_layers):
        present = layout.heads_present(layer)
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
        projections = {name: _select(linear, rows, dim=0) for name, linear in layout.head_projections(layer).items()}
        output = _select(layout.output_dense(layer), rows, dim=1)
        layout.set_output_dense(layer, output)
        if keep_positions:
            attn_self = layout.self_attention(layer)
            for name, linear in projections.items():
                setattr(attn_self, name, linear)
            layout.set_head_count(layer, len(keep_positions))
        else:
            layout.set_self_attention(layer, layout.empty_self_attention(layer, projections, output))
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
        UnsupportedArchitectureError: not a model of a supported family.
    """
    get_layout(model)
    model.config.pruned_heads = {
        str(layer): heads for layer, heads in sorted(pruned_heads_dict(model.config).items())
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
    pruned = pruned_heads_dict(config)
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
    """Parameter count of a sequence classifier of ``config`` after removing the heads with ``mask == 0``.

    BERT: the full count from the architecture arithmetic (embeddings, L layers, pooler and, if ``classifier``, the
    ``BertForSequenceClassification`` head; ``classifier=False`` gives ``BertModel`` with pooler). Other families
    (their embeddings and classifier heads differ): the count of the model built from ``config`` on the ``meta``
    device (no memory, no weights), ``AutoModel``'s bare model when ``classifier`` is False. Minus, per removed head, ``P*(hidden*d + d)`` (the rows and biases of its P
    per-head projections: Q/K/V, and DeBERTa-v2's ``pos_key_proj`` / ``pos_query_proj`` when present) ``+ hidden*d``
    (W_O columns; W_O's bias stays). Heads already in ``config.pruned_heads`` count as removed too (as after
    :func:`remove_heads`).

    Args:
        config: the configuration of a supported family.
        mask: ``[L, H]``, 0 = removed (original indexing).

    Raises:
        ValueError: wrong mask shape. UnsupportedArchitectureError: a family without an adapter.
    """
    h, L, H = config.hidden_size, config.num_hidden_layers, config.num_attention_heads
    mask = torch.as_tensor(mask)
    if tuple(mask.shape) != (L, H):
        raise ValueError(f"head mask has shape {list(mask.shape)}; expected [L, H]=[{L}, {H}]")
    if config.model_type == "bert":
        d, inter = h // H, config.intermediate_size
        embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h
        embeddings += 2 * h  # LayerNorm
        attention = 4 * (h * h + h) + 2 * h  # Q, K, V, W_O (+ biases), LayerNorm
        feed_forward = (h * inter + inter) + (inter * h + h) + 2 * h  # two Linears, LayerNorm
        pooler = h * h + h
        full = embeddings + L * (attention + feed_forward) + pooler
        if classifier:
            full += h * config.num_labels + config.num_labels
        per_head = 3 * (h * d + d) + h * d
    else:
        full, per_head = _built_counts(config, classifier)

    removed = mask == 0
    for layer, heads in pruned_heads_dict(config).items():
        removed[layer, heads] = True
    return full - int(removed.sum()) * per_head


def _built_counts(config, classifier: bool) -> tuple[int, int]:
    """(parameters of the unpruned model of ``config`` built on the meta device, parameters per head)."""
    import copy as _copy

    from transformers import AutoModel, AutoModelForSequenceClassification

    config = _copy.deepcopy(config)
    config.pruned_heads = {}
    with torch.device("meta"):
        model = (AutoModelForSequenceClassification if classifier else AutoModel).from_config(config)
    layout = get_layout(model)
    d = layout.head_size
    per_head = sum(lin.in_features * d + (d if lin.bias is not None else 0)
                   for lin in layout.head_projections(0).values())
    return count_parameters(model), per_head + layout.output_dense(0).out_features * d
