"""What a sequence classifier costs per example, with and without its pruned heads (part of :mod:`headprune_bench.methods.heads`).

FLOPs here are those of the matrix products (2 per multiply-add), the convention of
``torch.utils.flop_counter.FlopCounterMode``, which checks these formulas in the tests (eager attention; on the
CPU it does not count PyTorch's fused SDPA kernel). Element-wise work (softmax, GELU, LayerNorm, residual adds,
embedding look-ups) is left out: O(T h) per layer against O(T h^2) for the products.

Per layer of a model with hidden size h, intermediate size i, head size d, T tokens and k heads kept:

* Q, K, V projections ``3 * 2 T h (k d)``; attention scores ``2 T^2 (k d)``; weighted values ``2 T^2 (k d)``;
  output projection ``2 T (k d) h``: all proportional to k, so removing heads removes them;
* feed-forward ``2 * 2 T h i``: untouched by head pruning;

then the pooler ``2 h^2`` and the classifier ``2 h C`` on the [CLS] token. A masked model (heads multiplied by 0)
computes every head: it costs what the dense model costs. Only physical removal saves FLOPs.

The other families differ from BERT in (and the formulas add):

* RoBERTa / XLM-R / ELECTRA / DistilBERT: a classification head of the same cost (dense ``h x h``, then ``h x C``;
  DistilBERT's ``pre_classifier`` and ``classifier``); ELECTRA projects embeddings of size e to h when they
  differ (``2 T e h``, in :attr:`Flops.other`); DistilBERT's feed-forward size is ``hidden_dim``.
* DeBERTa-v2/v3: per layer and kept head, the relative-position embeddings (2S rows, S = ``position_buckets`` or
  else ``max_relative_positions``) go through the head's key rows (for c2p) and query rows (for p2c):
  ``2 * 2S h d`` each, once per forward, counted here for a batch of one. With ``share_att_key`` true, the code
  projects through both ``key_proj`` and ``query_proj`` whichever kinds ``pos_att_type`` lists; otherwise it
  projects once per listed kind. Each listed kind then scores ``2 T 2S d`` (a product with every relative
  position, then gathered). The pooler is ``h x pooler_hidden_size``. DeBERTa-v2's convolution after the first
  layer (``conv_kernel_size`` k > 0, ``conv_groups`` g) costs ``2 T h (h / g) k`` in :attr:`Flops.other`;
  head pruning does not touch it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from headprune_bench.methods.heads.layout import pruned_heads_dict


@dataclass(frozen=True)
class Flops:
    """Matmul FLOPs of one forward pass of one example (see the module docstring).

    Attributes:
        attention: Q/K/V and output projections, scores and weighted values (DeBERTa: and its relative-position
            terms), every layer.
        feed_forward: the two feed-forward products, every layer.
        head: pooler and classifier.
        other: products head pruning does not touch besides those: ELECTRA's projection of its embeddings to the
            hidden size, DeBERTa-v2's convolution (0 for the other families).
    """

    attention: int
    feed_forward: int
    head: int
    other: int = 0

    @property
    def total(self) -> int:
        """All of them."""
        return self.attention + self.feed_forward + self.head + self.other


def heads_kept(config, mask: torch.Tensor | None = None) -> list[int]:
    """Heads each layer keeps: ``num_attention_heads`` minus those of ``mask == 0`` (``[L, H]``, optional) and of
    ``config.pruned_heads``.

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
    """Matmul FLOPs per example of length ``seq_len`` for the sequence classifier of ``config`` (any supported
    family) with the heads of ``mask == 0`` (and ``config.pruned_heads``) physically removed; ``mask=None``: the
    heads of the config.

    Args:
        config: the model's configuration (hidden size, feed-forward size, layers, heads, ``num_labels``; DeBERTa's
            relative-attention fields; ELECTRA's ``embedding_size``).
        seq_len: T, tokens per example (padding included: a padded token is computed like any other).
        mask: optional ``[L, H]``, 0 = removed.
        classifier: count the ``num_labels`` classifier (else the pooler only).

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
    """DeBERTa-v2's relative-position FLOPs per head and example (module docstring); 0 for other families."""
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
