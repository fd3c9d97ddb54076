"""Sequence classifiers with attention heads physically removed, loadable by stock transformers (5.x) from a
folder that ``bench export`` wrote: ``AutoModelForSequenceClassification.from_pretrained(folder,
trust_remote_code=True)``. Copied into every such folder; imports nothing of headprune-bench.
"""
from __future__ import annotations

import warnings

from torch import nn
from transformers import (
    BertForSequenceClassification,
    DebertaV2ForSequenceClassification,
    DistilBertForSequenceClassification,
    ElectraForSequenceClassification,
    RobertaForSequenceClassification,
    XLMRobertaForSequenceClassification,
)

#: Per family: (layers, self-attention from a layer, Q/K/V names, W_O from a layer, head-count attributes).
FAMILIES = {
    "bert": ("encoder.layer", "attention.self", ("query", "key", "value"), "attention.output.dense",
             ("num_attention_heads", "all_head_size")),
    "distilbert": ("transformer.layer", "attention", ("q_lin", "k_lin", "v_lin"), "attention.out_lin",
                   ("n_heads",)),
    "deberta-v2": ("encoder.layer", "attention.self", ("query_proj", "key_proj", "value_proj"),
                   "attention.output.dense", ("num_attention_heads", "all_head_size")),
}
FAMILIES["roberta"] = FAMILIES["xlm-roberta"] = FAMILIES["electra"] = FAMILIES["bert"]
POSITION_PROJECTIONS = ("pos_key_proj", "pos_query_proj")  # DeBERTa-v2 without share_att_key: per head too


class EmptySelfAttention(nn.Module):
    """Self-attention without heads: ``[B, T, hidden]`` -> ``[B, T, 0]`` (or W_O's bias, DistilBERT), no weights."""

    def __init__(self, projections: dict, value_name: str, head_size: int, output: tuple | None = None) -> None:
        super().__init__()
        for name, linear in projections.items():
            setattr(self, name, linear)
        self.value_name, self.output_name = value_name, output[0] if output else None
        if output:
            setattr(self, output[0], output[1])
        self.num_attention_heads, self.attention_head_size, self.all_head_size = 0, head_size, 0

    def forward(self, hidden_states, *args, **kwargs):
        out = getattr(self, self.value_name)(hidden_states)
        if self.output_name is not None:
            out = getattr(self, self.output_name)(out)
        return out, None


def heads_kept_per_layer(config) -> list[int]:
    """How many heads each layer keeps, from ``config.pruned_heads``.

    Raises:
        ValueError: a layer or head index outside the model.
    """
    heads, layers = config.num_attention_heads, config.num_hidden_layers
    kept = [heads] * layers
    for layer, removed in (getattr(config, "pruned_heads", None) or {}).items():
        removed = {int(h) for h in ([removed] if isinstance(removed, int) else removed)}
        if not 0 <= int(layer) < layers or any(not 0 <= h < heads for h in removed):
            raise ValueError(f"pruned_heads {{{layer}: {sorted(removed)}}} outside {layers} layers x {heads} heads")
        kept[int(layer)] = heads - len(removed)
    return kept


def _resolve(module: nn.Module, path: str) -> tuple[nn.Module, str]:
    """(parent module, attribute name) of the dotted ``path`` under ``module``."""
    *parents, name = path.split(".")
    for part in parents:
        module = getattr(module, part)
    return module, name


def shrink(model: nn.Module) -> nn.Module:
    """Rebuild, in place, the attention modules of a freshly built ``model`` with the head counts of
    ``config.pruned_heads``; returns ``model``."""
    config = model.config
    layers_path, self_path, names, output_path, count_names = FAMILIES[config.model_type]
    hidden = config.hidden_size
    head_size = getattr(config, "attention_head_size", None) or hidden // config.num_attention_heads
    parent, name = _resolve(model.base_model, layers_path)
    with warnings.catch_warnings():  # torch warns that initialising a zero-element tensor does nothing
        warnings.simplefilter("ignore", UserWarning)
        for layer, kept in zip(getattr(parent, name), heads_kept_per_layer(config)):
            if kept == config.num_attention_heads:
                continue
            width = kept * head_size
            owner, self_name = _resolve(layer, self_path)
            attention = getattr(owner, self_name)
            projection_names = list(names) + [n for n in POSITION_PROJECTIONS
                                              if isinstance(getattr(attention, n, None), nn.Linear)]
            projections = {n: nn.Linear(hidden, width, bias=getattr(attention, n).bias is not None)
                           for n in projection_names}
            out_owner, out_name = _resolve(layer, output_path)
            output = nn.Linear(width, hidden)
            setattr(out_owner, out_name, output)
            if kept == 0:
                inside = out_owner is attention  # W_O belongs to the self-attention module (DistilBERT)
                setattr(owner, self_name, EmptySelfAttention(
                    projections, names[2], head_size, (out_name, output) if inside else None))
                continue
            for n, linear in projections.items():
                setattr(attention, n, linear)
            for n in count_names:
                setattr(attention, n, kept if n != "all_head_size" else width)
    return model


class _KeptHeads:
    """Mixin: build the stock classifier, then give each layer the head count of ``config.pruned_heads``."""

    def __init__(self, config) -> None:
        super().__init__(config)
        shrink(self)


class PrunedBertForSequenceClassification(_KeptHeads, BertForSequenceClassification):
    """``BertForSequenceClassification`` with the head counts of ``config.pruned_heads``."""


class PrunedRobertaForSequenceClassification(_KeptHeads, RobertaForSequenceClassification):
    """``RobertaForSequenceClassification`` with the head counts of ``config.pruned_heads``."""


class PrunedXLMRobertaForSequenceClassification(_KeptHeads, XLMRobertaForSequenceClassification):
    """``XLMRobertaForSequenceClassification`` with the head counts of ``config.pruned_heads``."""


class PrunedElectraForSequenceClassification(_KeptHeads, ElectraForSequenceClassification):
    """``ElectraForSequenceClassification`` with the head counts of ``config.pruned_heads``."""


class PrunedDistilBertForSequenceClassification(_KeptHeads, DistilBertForSequenceClassification):
    """``DistilBertForSequenceClassification`` with the head counts of ``config.pruned_heads``."""


class PrunedDebertaV2ForSequenceClassification(_KeptHeads, DebertaV2ForSequenceClassification):
    """``DebertaV2ForSequenceClassification`` with the head counts of ``config.pruned_heads``."""


#: ``config.model_type`` -> the class of this file that loads it (``auto_map``).
CLASSES = {"bert": PrunedBertForSequenceClassification, "roberta": PrunedRobertaForSequenceClassification,
           "xlm-roberta": PrunedXLMRobertaForSequenceClassification,
           "electra": PrunedElectraForSequenceClassification,
           "distilbert": PrunedDistilBertForSequenceClassification,
           "deberta-v2": PrunedDebertaV2ForSequenceClassification}
