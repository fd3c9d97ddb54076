"""Physical head removal, its in-place equivalent (zeroed value weights), save/load of pruned models and
parameter counts. See docs/heads.md ("Physical removal", "FLOPs and parameters")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from headprune_bench.methods.heads.families import get_layout
from headprune_bench.methods.heads.layout import HeadLayout, mask_from_pruned_heads, pruned_heads_dict


def _check_structural_mask(layout: HeadLayout, mask) -> torch.Tensor:
    """A binary ``[L, H]`` mask as a CPU tensor, or ValueError."""
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
    """Row indices ``[len(positions)*d]`` of the given head positions."""
    return torch.tensor(
        [p * head_size + i for p in positions for i in range(head_size)], dtype=torch.long
    )


def zero_value_heads(model: nn.Module, mask: torch.Tensor) -> nn.Module:
    """Zero, in place, the value rows and bias entries of the heads of ``mask == 0`` (binary ``[L, H]``, original
    indices); equals masking with ``mask``. Returns ``model``. Raises UnsupportedArchitectureError; ValueError:
    wrong shape or non-binary mask."""
    layout = get_layout(model)
    return scale_value_heads(model, _check_structural_mask(layout, mask))


def scale_value_heads(model: nn.Module, gates: torch.Tensor) -> nn.Module:
    """Multiply, in place, each present head's value rows and bias entries by its gate (float ``[L, H]``, original
    indices); equals masking with ``gates``. Returns ``model``. Raises UnsupportedArchitectureError; ValueError:
    ``gates`` is not ``[L, H]``."""
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
    """New Linear keeping ``index`` along ``dim`` (0: rows and bias; 1: columns, bias whole), as HF 4.x
    ``prune_linear_layer``."""
    index = index.to(linear.weight.device)
    weight = linear.weight.index_select(dim, index).detach().clone()
    bias = None
    if linear.bias is not None:
        bias = linear.bias if dim == 1 else linear.bias[index]
        bias = bias.detach().clone()
    # on "meta": no random init, no warning on 0-sized weights
    new = nn.Linear(1, 1, bias=bias is not None, device="meta")
    new.out_features, new.in_features = weight.shape
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias, requires_grad=linear.bias.requires_grad)
    return new


def remove_heads(model: nn.Module, mask: torch.Tensor) -> nn.Module:
    """Physically remove the heads of ``mask == 0``, in place: their rows of every per-head projection, their
    columns of W_O (bias kept), an :class:`~headprune_bench.methods.heads.layout.EmptySelfAttention` for a layer
    left without heads; merged into ``config.pruned_heads`` (``{str(layer): sorted original indices}``). Removing a
    removed head is a no-op. Semantics of HF 4.x ``BertAttention.prune_heads``; docs/protocol.md §9.

    Args:
        model: a model of a supported family, possibly partly pruned.
        mask: binary ``[L, H]``, original head indices, 0 = remove.

    Returns:
        ``model`` (same object).

    Raises:
        UnsupportedArchitectureError; ValueError: wrong shape or non-binary mask, or module widths inconsistent
            with ``config.pruned_heads``.
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


def save_pruned(model: nn.Module, path, tokenizer=None) -> None:
    """``model.save_pretrained(path)`` with ``config.pruned_heads`` (original indices); ``tokenizer`` saved beside.
    Raises UnsupportedArchitectureError: not a model of a supported family."""
    get_layout(model)
    model.config.pruned_heads = {
        str(layer): heads for layer, heads in sorted(pruned_heads_dict(model.config).items())
    }
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    _readable_as_umask_allows(Path(path))


def _readable_as_umask_allows(folder: Path) -> None:
    """Give the saved files the mode a plain ``open`` would (0o666 less the umask): transformers writes
    ``model.safetensors`` through a private temporary file, 0o600, which others sharing a model cannot read."""
    umask = os.umask(0)
    os.umask(umask)
    for f in folder.iterdir():
        if f.is_file():
            f.chmod(0o666 & ~umask)


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
    """Load a model written by :func:`save_pruned`, in eval mode: the unpruned architecture, :func:`remove_heads`
    by ``config.pruned_heads``, then the safetensors state dict strictly, in its saved dtype.

    ``model_cls``: an Auto or concrete class (default AutoModelForSequenceClassification); ``attn_implementation``:
    e.g. ``"eager"`` or ``"sdpa"`` (default transformers'). Raises RuntimeError: the state dict does not match.
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


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (shared parameters counted once)."""
    return sum(p.numel() for p in model.parameters())


def closed_form_parameter_count(config, mask: torch.Tensor, *, classifier: bool = True) -> int:
    """Parameter count of the sequence classifier of ``config`` (the bare model with ``classifier=False``) after
    removing the heads of ``mask == 0`` (``[L, H]``, original indices) and of ``config.pruned_heads``; the
    arithmetic is in docs/heads.md ("FLOPs and parameters").

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
    """(parameters of the unpruned model of ``config``, built on the meta device; parameters per head)."""
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
