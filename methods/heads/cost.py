"""Matmul FLOPs (2 per multiply-add) of a sequence classifier per example, with its pruned heads removed; the
formulas per family are in docs/heads.md ("FLOPs and parameters")."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from headprune_bench.methods.heads.layout import pruned_heads_dict


@dataclass(frozen=True)
class Flops:
    """Matmul FLOPs of one forward pass of one example: ``attention`` (Q/K/V/O, scores, weighted values, DeBERTa's
    relative terms), ``feed_forward``, ``head`` (pooler, classifier), ``other`` (ELECTRA's embedding projection,
    DeBERTa-v2's convolution)."""

    attention: int
    feed_forward: int
    head: int
    other: int = 0

    @property
    def total(self) -> int:
        """The sum of the four parts."""
        return self.attention + self.feed_forward + self.head + self.other


def heads_kept(config, mask: torch.Tensor | None = None) -> list[int]:
    """Heads each layer keeps (``[L]``), removing those of ``mask == 0`` (``[L, H]``) and ``config.pruned_heads``.

    Raises:
        ValueError: ``mask`` is not ``[L, H]``.
    """
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    removed = torch.zeros(layers, heads, dtype=torch.bool)
    if mask is not None:
        mask = torch.as_tensor(mask)
        if tuple(mask.shape) != (layers, heads):
            raise ValueError(f"head mask has shape {list(mask.shape)}; expected [L, H]=[{layers}, {heads}]")
        removed |= mask == 0
    for layer, pruned in pruned_heads_dict(config).items():
        removed[layer, pruned] = True
    return [heads - int(row.sum()) for row in removed]


def forward_flops(config, seq_len: int, mask: torch.Tensor | None = None, *, classifier: bool = True) -> Flops:
    """Matmul FLOPs per example of the sequence classifier of ``config`` (any supported family) with the heads of
    ``mask == 0`` and ``config.pruned_heads`` removed.

    Args:
        config: the model's configuration. seq_len: T, tokens per example, padding included.
        mask: optional ``[L, H]``, 0 = removed. classifier: count the classifier (else the pooler only).

    Raises:
        ValueError: ``seq_len < 1`` or a mask of the wrong shape.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    h, t = config.hidden_size, seq_len
    i = getattr(config, "intermediate_size", None) or config.hidden_dim  # DistilBERT: hidden_dim
    d = int(getattr(config, "attention_head_size", None) or h // config.num_attention_heads)
    per_head = 2 * (3 * t * h * d + 2 * t * t * d + t * d * h)
    per_head += _relative_flops(config, t, d)
    attention = sum(k * per_head for k in heads_kept(config, mask))
    feed_forward = config.num_hidden_layers * 2 * (2 * t * h * i)
    pooled = h
    if config.model_type == "deberta-v2":
        pooled = getattr(config, "pooler_hidden_size", None) or h
    head = 2 * h * pooled + (2 * pooled * config.num_labels if classifier else 0)
    embedding_size = getattr(config, "embedding_size", None) if config.model_type == "electra" else None
    other = 2 * t * embedding_size * h if embedding_size and embedding_size != h else 0
    kernel = getattr(config, "conv_kernel_size", 0) if config.model_type == "deberta-v2" else 0
    if kernel and kernel > 0:
        other += 2 * t * h * (h // getattr(config, "conv_groups", 1)) * kernel
    return Flops(attention=attention, feed_forward=feed_forward, head=head, other=other)


def _relative_flops(config, tokens: int, head_size: int) -> int:
    """DeBERTa-v2's relative-position FLOPs per head and example; 0 for other families."""
    if config.model_type != "deberta-v2" or not getattr(config, "relative_attention", False):
        return 0
    span = getattr(config, "position_buckets", -1)
    if span <= 0:
        span = getattr(config, "max_relative_positions", -1)
        if span < 1:
            span = config.max_position_embeddings
    kinds = [k for k in ("c2p", "p2c") if k in (config.pos_att_type or [])]
    projections = 2 if getattr(config, "share_att_key", False) else len(kinds)
    span2 = 2 * span
    return projections * 2 * span2 * config.hidden_size * head_size + len(kinds) * 2 * tokens * span2 * head_size
