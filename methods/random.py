"""Random pruning: the baseline every method must beat.

No official code exists (shared/reference/methods.md §2). Protocol: sample ``K`` of the ``L*H`` heads uniformly
without replacement, with ``K`` matched to another method's count; optionally keep at least one head per layer
(AUBER never prunes a layer's last head); optionally match per-layer counts (``context.target_per_layer``),
the stricter control for a layer-wise method such as AUBER.
"""
from __future__ import annotations

import torch
from torch import nn

from headprune_bench.methods.base import HeadPruner, PruningContext, PruningResult
from headprune_bench.methods.options import Interval
from headprune_bench.methods.registry import register


@register
class RandomPruner(HeadPruner):
    """Prune ``context.target_heads`` heads chosen uniformly at random without replacement.

    Options:
        min_heads_per_layer (int, default 0): never leave a layer with fewer kept heads (1 = AUBER's rule).
        per_layer (bool, default True): when the context gives ``target_per_layer``, sample that many heads in
            each layer instead of a global draw.

    Randomness: a CPU generator seeded from ``context.seed`` only (no global RNG is touched), so the mask is a
    function of the seed.

    Raises:
        ValueError: no target given, or the target is unreachable under ``min_heads_per_layer``.
    """

    name = "random"
    report_order, report_color = 10, "#AAAAAA"
    summary = "uniform random heads without replacement (baseline; seeded)"
    defaults = {"min_heads_per_layer": 0, "per_layer": True}
    constraints = {"min_heads_per_layer": Interval(0, None)}

    def prune(self, model: nn.Module, context: PruningContext) -> PruningResult:
        """Sample the mask (class docstring): per layer when ``target_per_layer`` is given and ``per_layer``, else
        a uniformly random order of all heads, walked while skipping heads that would break the per-layer floor.

        Raises:
            ValueError: no budget, or a target unreachable under ``min_heads_per_layer``.
        """
        if context.target_heads is None and context.target_per_layer is None:
            raise ValueError("method 'random' needs a budget: give --budget heads:K, fraction:F or matched:METHOD")
        gen = context.generator(salt=101)
        num_layers, num_heads = context.num_layers, context.num_heads
        mask = torch.ones(num_layers, num_heads)
        # scores: each head's position in the drawn order (pruned first = lowest), so that a per-layer floor applied
        # after pruning (bench run --min-heads-per-layer) continues the same random draw
        scores = torch.zeros(num_layers, num_heads)
        if context.target_per_layer is not None and self.options["per_layer"]:
            for layer, k in enumerate(context.target_per_layer):
                if not 0 <= k <= num_heads - self.options["min_heads_per_layer"]:
                    raise ValueError(f"layer {layer}: cannot prune {k} of {num_heads} heads")
                order = torch.randperm(num_heads, generator=gen)
                mask[layer, order[:k]] = 0
                scores[layer, order] = torch.arange(num_heads, dtype=torch.float32)
            return PruningResult(mask=mask, scores=scores, trace={"mode": "per-layer"})
        # A uniformly random order of all heads; walk it and skip heads that would break the per-layer floor.
        # Without a floor this is exactly sampling K heads without replacement.
        k = int(context.target_heads)
        floor = self.options["min_heads_per_layer"]
        if not 0 <= k <= num_layers * (num_heads - floor):
            raise ValueError(
                f"method 'random': cannot prune {k} heads of {num_layers}x{num_heads} keeping {floor} per layer"
            )
        pruned = 0
        order = torch.randperm(num_layers * num_heads, generator=gen)
        scores.view(-1)[order] = torch.arange(num_layers * num_heads, dtype=torch.float32)
        for idx in order.tolist():
            if pruned == k:
                break
            layer, head = divmod(idx, num_heads)
            if mask[layer].sum() - 1 < floor:
                continue
            mask[layer, head] = 0
            pruned += 1
        return PruningResult(mask=mask, scores=scores, trace={"mode": "global"})
