"""What a BERT classifier costs per example, with and without its pruned heads (part of :mod:`methods.heads`).

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
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from methods.heads.layout import _pruned_heads_dict


@dataclass(frozen=True)
class Flops:
    """Matmul FLOPs of one forward pass of one example (see the module docstring).

    Attributes:
        attention: Q/K/V and output projections, scores and weighted values, every layer.
        feed_forward: the two feed-forward products, every layer.
        head: pooler and classifier.
    """

    attention: int
    feed_forward: int
    head: int

    @property
    def total(self) -> int:
        """All of them."""
        return self.attention + self.feed_forward + self.head


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
    for layer, pruned in _pruned_heads_dict(config).items():
        removed[layer, pruned] = True
    return [heads - int(row.sum()) for row in removed]


def forward_flops(config, seq_len: int, mask: torch.Tensor | None = None, *, classifier: bool = True) -> Flops:
    """Matmul FLOPs per example of length ``seq_len`` for the BERT classifier of ``config`` with the heads of
    ``mask == 0`` (and ``config.pruned_heads``) physically removed; ``mask=None``: the heads of the config.

    Args:
        config: a ``BertConfig`` (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
            num_labels).
        seq_len: T, tokens per example (padding included: a padded token is computed like any other).
        mask: optional ``[L, H]``, 0 = removed.
        classifier: count the ``num_labels`` classifier (else the pooler only).

    Raises:
        ValueError: ``seq_len < 1`` or a mask of the wrong shape.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    h, i, t = config.hidden_size, config.intermediate_size, seq_len
    d = h // config.num_attention_heads
    attention = sum(2 * (3 * t * h * k * d + 2 * t * t * k * d + t * k * d * h) for k in heads_kept(config, mask))
    feed_forward = config.num_hidden_layers * 2 * (2 * t * h * i)
    head = 2 * h * h + (2 * h * config.num_labels if classifier else 0)
    return Flops(attention=attention, feed_forward=feed_forward, head=head)
