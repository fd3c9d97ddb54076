"""A BERT sequence classifier with attention heads physically removed, loadable by stock transformers.

This file is copied into every folder that headprune-bench exports (``bench export``); it needs only torch and
transformers (5.x) and imports nothing of headprune-bench. Load the folder with::

    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)

``config.json`` names this class in ``auto_map`` and lists the removed heads in ``pruned_heads``
(``{"layer": [original head indices]}``). Stock ``BertForSequenceClassification`` cannot load such a folder: since
transformers 5 it builds every layer with ``num_attention_heads`` heads, so uneven layers fail with a size
mismatch. This class builds each layer with the heads it kept, in their original order: a layer of k kept heads
has Q/K/V projections of ``k * head_size`` rows and an attention output projection of ``k * head_size`` input
columns (its bias kept whole); a layer that kept no head has zero-width Q/K/V and its attention block adds only
that bias (``EmptySelfAttention``). The arithmetic is the one of transformers 4's ``BertAttention.prune_heads``.
"""
from __future__ import annotations

import warnings

from torch import nn
from transformers import BertForSequenceClassification


class EmptySelfAttention(nn.Module):
    """The self-attention of a layer without heads: ``[B, T, hidden]`` -> ``[B, T, 0]`` (no attention weights).
    Zero-width ``query``/``key``/``value`` keep the checkpoint's parameter names."""

    def __init__(self, hidden_size: int, head_size: int) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(hidden_size, 0) for _ in range(3))
        self.num_attention_heads, self.attention_head_size, self.all_head_size = 0, head_size, 0

    def forward(self, hidden_states, *args, **kwargs):
        return self.value(hidden_states), None


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


class PrunedBertForSequenceClassification(BertForSequenceClassification):
    """``BertForSequenceClassification`` whose layers have the head counts of ``config.pruned_heads``."""

    def __init__(self, config) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        head_size = hidden // config.num_attention_heads
        with warnings.catch_warnings():  # torch warns that initialising a zero-element tensor does nothing
            warnings.simplefilter("ignore", UserWarning)
            for layer, kept in zip(self.bert.encoder.layer, heads_kept_per_layer(config)):
                if kept == config.num_attention_heads:
                    continue
                attention = layer.attention
                width = kept * head_size
                if kept == 0:
                    attention.self = EmptySelfAttention(hidden, head_size)
                else:
                    attention.self.query = nn.Linear(hidden, width)
                    attention.self.key = nn.Linear(hidden, width)
                    attention.self.value = nn.Linear(hidden, width)
                    attention.self.num_attention_heads, attention.self.all_head_size = kept, width
                attention.output.dense = nn.Linear(width, hidden)
